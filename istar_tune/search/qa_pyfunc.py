"""An extractive-QA model as MLflow serves it: a model from code (this file is saved with the model, which then needs
only torch and transformers, not istar-tune). transformers 5 has no question-answering pipeline, so MLflow's
transformers flavour cannot save one; :func:`istar_tune.search.logged_models.save_qa_model` saves the trained
encoder, its tokenizer and this file instead.

``predict`` takes rows with ``question`` and ``context`` (a DataFrame or a list of mappings) and returns one answer
text per row, by the rule a trial's evaluation scores with: the context is split into windows of ``max_length``
tokens overlapping by ``stride``, and the answer is the best span inside the context (start ≤ end, at most
``max_answer_tokens`` tokens) over the windows, scored by start + end logit; with ``unanswerable`` questions an
empty answer where the [CLS] null score is higher. The settings come from the model's ``model_config``.

Never imported by the package: MLflow runs it when the model is loaded.
"""

import math

import mlflow
import pandas as pd


class ExtractiveQA(mlflow.pyfunc.PythonModel):
    """An encoder with a span head, answering questions from their contexts."""

    def load_context(self, context):
        import transformers

        folder = context.artifacts["model"]
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
        self.config = dict(context.model_config or {})

    def predict(self, context, model_input: pd.DataFrame, params=None) -> list[str]:
        rows = model_input.to_dict("records") if hasattr(model_input, "to_dict") else list(model_input)
        return [self.answer(str(row["question"]), str(row["context"])) for row in rows]

    def answer(self, question: str, text: str) -> str:
        import torch

        question_first = self.tokenizer.padding_side == "right"
        pair = (question, text) if question_first else (text, question)
        encoded = self.tokenizer(*pair, truncation="only_second" if question_first else "only_first",
                                 max_length=int(self.config["max_length"]), stride=int(self.config["stride"]),
                                 return_overflowing_tokens=True, return_offsets_mapping=True, padding=True,
                                 return_tensors="pt")
        offsets = encoded.pop("offset_mapping").tolist()
        windows = [encoded.sequence_ids(w) for w in range(len(offsets))]
        inputs = {k: v for k, v in encoded.items() if k in self.tokenizer.model_input_names}
        with torch.no_grad():
            output = self.model(**inputs)
        longest = int(self.config["max_answer_tokens"])
        best, found, null = -math.inf, "", math.inf
        for w, ids in enumerate(windows):
            starts, ends = output.start_logits[w].float(), output.end_logits[w].float()
            null = min(null, float(starts[0] + ends[0]))
            inside = torch.tensor([i == (1 if question_first else 0) for i in ids])
            n = len(ids)
            span = torch.ones(n, n, dtype=torch.bool).triu() & ~torch.ones(n, n, dtype=torch.bool).triu(longest)
            scores = (starts[:, None] + ends[None, :]).masked_fill(~(span & inside[:, None] & inside[None, :]),
                                                                  -math.inf)
            start, end = divmod(int(scores.argmax()), n)
            if float(scores[start, end]) > best:
                best, found = float(scores[start, end]), text[offsets[w][start][0]:offsets[w][end][1]]
        if self.config.get("unanswerable") and null > best:
            return ""
        return found


mlflow.models.set_model(ExtractiveQA())
