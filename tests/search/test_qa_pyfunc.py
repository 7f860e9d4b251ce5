"""The extractive-QA model as MLflow serves it, against the span rule its docstring states (written here from the
rule, not from the trial's evaluation code): the best span inside the context, start ≤ end, at most
``max_answer_tokens`` tokens, over every window; an empty answer where the null score wins for unanswerable
questions."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from istar_tune.models import load_tokenizer
from istar_tune.search import logged_models

QUESTION, CONTEXT = "Who wrote it?", "The letter was written by Ada Lovelace in 1843 in London."


class Scripted(torch.nn.Module):
    """A span head that scores what the test says: ``pick(tokens) -> (start logits, end logits)`` per window."""

    def __init__(self, pick):
        super().__init__()
        self.pick = pick

    def forward(self, input_ids, **_):
        scores = [self.pick(row.tolist()) for row in input_ids]
        return SimpleNamespace(start_logits=torch.stack([s for s, _ in scores]),
                               end_logits=torch.stack([e for _, e in scores]))


def _model(pick, max_length=64, stride=16, unanswerable=False, longest=30):
    module = runpy.run_path(str(logged_models.QA_MODEL_CODE))  # the file as MLflow runs it
    qa = module["ExtractiveQA"]()
    qa.tokenizer, qa.model = load_tokenizer("tiny-bert"), Scripted(pick)
    qa.config = {"max_length": max_length, "stride": stride, "max_answer_tokens": longest,
                 "unanswerable": unanswerable}
    return qa


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _scores(tokens, start_ids, end_ids, null=0.0):
    """High start logits on the first token of ``start_ids`` found in the window, high end on the last of
    ``end_ids``; [CLS] scores ``null`` for each."""
    start, end = torch.full((len(tokens),), -5.0), torch.full((len(tokens),), -5.0)
    start[0] = end[0] = null
    for i in range(len(tokens) - len(start_ids) + 1):
        if tokens[i:i + len(start_ids)] == start_ids:
            start[i] = 5.0
    for i in range(len(tokens) - len(end_ids) + 1):
        if tokens[i:i + len(end_ids)] == end_ids:
            end[i + len(end_ids) - 1] = 5.0
    return start, end


def test_the_answer_is_the_context_span_the_head_scores_highest():
    tokenizer = load_tokenizer("tiny-bert")
    name = _ids(tokenizer, "Ada Lovelace")
    qa = _model(lambda tokens: _scores(tokens, name, name))
    assert qa.predict(None, [{"question": QUESTION, "context": CONTEXT}]) == ["Ada Lovelace"]


def test_a_span_in_the_question_is_never_the_answer():
    tokenizer = load_tokenizer("tiny-bert")
    wrote, year = _ids(tokenizer, "wrote"), _ids(tokenizer, "1843")  # "wrote" is in the question alone

    def pick(tokens):
        (question_start, question_end), (year_start, year_end) = (_scores(tokens, wrote, wrote),
                                                                  _scores(tokens, year, year))
        return torch.maximum(question_start, year_start - 2), torch.maximum(question_end, year_end - 2)

    assert _model(pick).predict(None, [{"question": QUESTION, "context": CONTEXT}]) == ["1843"]


def test_a_long_context_is_read_in_windows_and_an_answer_past_the_longest_span_is_not_taken():
    tokenizer = load_tokenizer("tiny-bert")
    context = " ".join(["Filler words fill this sentence."] * 12) + " The answer is Ada Lovelace."
    name = _ids(tokenizer, "Ada Lovelace")
    qa = _model(lambda tokens: _scores(tokens, name, name), max_length=32, stride=8)
    assert qa.predict(None, [{"question": QUESTION, "context": context}]) == ["Ada Lovelace"]
    the, lovelace = _ids(tokenizer, "The letter"), _ids(tokenizer, "Lovelace")  # more than 4 tokens apart
    short = _model(lambda tokens: _scores(tokens, the, lovelace), longest=4)
    [answer] = short.predict(None, [{"question": QUESTION, "context": CONTEXT}])
    assert answer in CONTEXT and len(_ids(tokenizer, answer)) <= 4


@pytest.mark.parametrize(("null", "answer"), [(20.0, ""), (-20.0, "Ada Lovelace")])
def test_an_unanswerable_question_is_empty_where_the_null_score_wins(null, answer):
    tokenizer = load_tokenizer("tiny-bert")
    name = _ids(tokenizer, "Ada Lovelace")
    qa = _model(lambda tokens: _scores(tokens, name, name, null=null), unanswerable=True)
    assert qa.predict(None, [{"question": QUESTION, "context": CONTEXT}]) == [answer]


def test_the_code_saved_with_each_model_is_the_packages_file():
    assert Path(logged_models.QA_MODEL_CODE).is_file() and logged_models.QA_MODEL_CODE.name == "qa_pyfunc.py"
