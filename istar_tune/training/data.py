"""Tokenising a task's splits with ``datasets.map`` (reading them is :mod:`istar_tune.data.reading`): sentence
tasks padded by the collator, SQuAD contexts split into overlapping windows, answers picked back out of the logits;
and the held-out share of the training data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

import datasets
import numpy as np

from istar_tune.errors import ConfigError
from istar_tune.tasks import EXTRACTIVE_QA, REGRESSION, SPLITS, Task
from istar_tune.training.scale import LabelScale

MAX_ANSWER_TOKENS = 30
N_BEST = 20

@dataclass
class EncodedData:
    """Tokenised splits ready for a ``DataLoader``, plus what SQuAD post-processing needs."""

    train: datasets.Dataset
    validation: datasets.Dataset
    raw_validation: datasets.Dataset
    eval_offsets: list | None = None
    """SQuAD: per validation feature, the character span of each token (``None`` outside the context)."""
    eval_example_ids: list | None = None
    """SQuAD: per validation feature, the id of the question it came from."""
    eval_cls: list | None = None
    """SQuAD: per validation feature, the position of its [CLS] token (where the null answer points)."""
    holdout: datasets.Dataset | None = None
    """Training examples held out to choose the scored epoch (the ``holdout`` setting; see :func:`hold_out`)."""
    answers_beyond_windows: int = 0
    """SQuAD: training questions whose answer no window holds whole (longer than a window's room for context): they
    train as "no answer" in every window, as SQuAD fine-tuning does, and the task's line counts them."""
    label_scale: LabelScale | None = None
    """Regression: the training scores' mean and deviation; every split's labels are z-scores of it
    (:mod:`istar_tune.training.scale`)."""

    @property
    def labels(self) -> np.ndarray | None:
        return None if "labels" not in self.validation.column_names else np.asarray(self.validation["labels"])


def hold_out(data: EncodedData, share: float, seed: int) -> EncodedData:
    """``data`` with a seeded random ``share`` (rounded up) of its training examples moved to ``holdout``
    (IsoLayer's paper chooses the epoch on a 70/30 train/validation split of the training data, and reports the dev
    set)."""
    if data.eval_offsets is not None:
        raise ConfigError("holdout applies to sentence-level tasks; SQuAD's training windows are not examples")
    held = math.ceil(len(data.train) * share)  # as datasets' train_test_split counts it
    if len(data.train) - held < 1:
        raise ConfigError(f"holdout {share} of {len(data.train)} training examples leaves one side empty: use more "
                          "training examples or another share")
    split = data.train.train_test_split(test_size=share, seed=int(seed) % 2**32, shuffle=True)
    labels = split["train"]["labels"]
    if len(set(labels)) < 2 and data.label_scale is None and len(set(data.train["labels"])) > 1:
        raise ConfigError(f"holdout {share} with seed {seed} leaves one class in the {len(labels)} training examples "
                          "it keeps: use more training examples, another share, or another holdout_seed")
    return dataclasses.replace(data, train=split["train"], holdout=split["test"])


def encode(task: Task, raw: datasets.DatasetDict, tokenizer, max_length: int = 128, squad_window: int | None = None,
           squad_stride: int | None = None) -> EncodedData:
    """Tokenise once with ``datasets.map(batched=True)``; padding is left to the collator (dynamic). SQuAD contexts
    are split into windows of ``squad_window`` tokens (default ``max_length``) overlapping by ``squad_stride``
    (default a quarter of the window)."""
    if task.problem_type == EXTRACTIVE_QA:
        window = squad_window or max_length
        stride = squad_stride or squad_doc_stride(window)
        _question_room(raw, tokenizer, window, stride)
        return _encode_squad(raw, tokenizer, window, stride)

    scale = LabelScale.of(raw["train"]["label"]) if task.problem_type == REGRESSION else None

    def tokenize(batch):
        encoded = tokenizer(*[batch[f] for f in task.text_fields], truncation=True, max_length=max_length)
        encoded["labels"] = scale.standardise(batch["label"]) if scale is not None else batch["label"]
        return encoded

    how = ("sentences", task.text_fields, max_length, scale.as_config() if scale else None)
    splits = {split: raw[split].map(tokenize, batched=True, remove_columns=raw[split].column_names,
                                    new_fingerprint=fingerprint(raw[split], tokenizer, tokenize, how),
                                    desc=f"Tokenising {task.display_name} {split}") for split in SPLITS}
    return EncodedData(train=splits["train"], validation=splits["validation"], raw_validation=raw["validation"],
                       label_scale=scale)


def fingerprint(split: datasets.Dataset, tokenizer, function, how: tuple) -> str | None:
    """The fingerprint of ``split`` mapped by ``function`` with ``tokenizer`` as ``how`` says, from what decides the
    result: the split's own fingerprint, the tokenizer's whole definition, the function's code and ``how``.
    ``datasets`` would otherwise hash the function with dill, the tokenizer's vocabulary with it: 0.4 s a run (0.04 s
    with this), which a search's short trials pay every time. ``None`` (``datasets`` hashes) for a tokenizer without
    a serialisable definition (a slow one)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    # The definition holds what the last call left set; every call sets its own truncation and padding anew.
    backend.no_truncation()
    backend.no_padding()
    digest = hashlib.sha256(backend.to_str().encode())
    digest.update(function.__code__.co_code)
    digest.update(json.dumps([split._fingerprint, type(tokenizer).__name__, list(tokenizer.model_input_names),
                              tokenizer.padding_side, tokenizer.truncation_side, list(how),
                              [c for c in function.__code__.co_consts if isinstance(c, (str, int, float))]]).encode())
    return digest.hexdigest()[:16]


def _question_room(raw: datasets.DatasetDict, tokenizer, window: int, stride: int) -> None:
    """Every question leaves room for its context in a window (the tokenizer would raise its truncation error): the
    questions that do not are refused, naming their rows and the way out."""
    room = window - tokenizer.num_special_tokens_to_add(pair=True) - stride
    for split in SPLITS:
        questions = [q.lstrip() for q in raw[split]["question"]]
        sizes = [len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
        long = [i for i, size in enumerate(sizes) if size >= room]
        if long:
            shown = ", ".join(str(i + 1) for i in long[:5]) + (f" and {len(long) - 5} more" if len(long) > 5 else "")
            raise ConfigError(f"{split} rows {shown}: a question of {max(sizes[i] for i in long)} tokens leaves no "
                              f"room for its context in a {window}-token window overlapping by {stride}: raise the "
                              "window (max_length; a recipe's squad_window where it sets one), or shorten those "
                              "questions")


def squad_doc_stride(max_length: int) -> int:
    """Overlap between the windows of a long SQuAD context: a quarter of the window (128 at 512)."""
    return max(8, max_length // 4)


def _encode_squad(raw: datasets.DatasetDict, tokenizer, max_length: int, stride: int) -> EncodedData:
    pad_right = tokenizer.padding_side == "right"

    def windows(batch):
        questions = [q.lstrip() for q in batch["question"]]
        first, second = (questions, batch["context"]) if pad_right else (batch["context"], questions)
        return tokenizer(first, second, truncation="only_second" if pad_right else "only_first",
                         max_length=max_length, stride=stride, return_overflowing_tokens=True,
                         return_offsets_mapping=True)

    def train_features(batch, indices):
        encoded = windows(batch)
        sample_map = encoded.pop("overflow_to_sample_mapping")
        offsets = encoded.pop("offset_mapping")
        spans, holds = [], []
        for i, offset in enumerate(offsets):
            ids = encoded["input_ids"][i]
            cls_index = ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
            spans.append(answer_span(offset, encoded.sequence_ids(i), 1 if pad_right else 0,
                                     batch["answers"][sample_map[i]], cls_index))
            holds.append(spans[-1] != (cls_index, cls_index))
        encoded["start_positions"], encoded["end_positions"] = [s for s, _ in spans], [e for _, e in spans]
        encoded["example"], encoded["holds_answer"] = [indices[s] for s in sample_map], holds
        return encoded

    def eval_features(batch):
        encoded = windows(batch)
        sample_map = encoded.pop("overflow_to_sample_mapping")
        context_id = 1 if pad_right else 0
        encoded["example_id"] = [batch["id"][s] for s in sample_map]
        encoded["cls_index"] = [ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
                                for ids in encoded["input_ids"]]
        encoded["offset_mapping"] = [
            [o if encoded.sequence_ids(i)[k] == context_id else None for k, o in enumerate(offsets)]
            for i, offsets in enumerate(encoded["offset_mapping"])
        ]
        return encoded

    train = raw["train"].map(train_features, batched=True, with_indices=True, remove_columns=raw["train"].column_names,
                             new_fingerprint=fingerprint(raw["train"], tokenizer, train_features,
                                                         ("squad", max_length, stride)),
                             desc="Tokenising SQuAD train")
    validation = raw["validation"].map(eval_features, batched=True, remove_columns=raw["validation"].column_names,
                                       new_fingerprint=fingerprint(raw["validation"], tokenizer, eval_features,
                                                                   ("squad", max_length, stride)),
                                       desc="Tokenising SQuAD validation")
    offsets, example_ids, cls = validation["offset_mapping"], validation["example_id"], validation["cls_index"]
    validation = validation.remove_columns(["offset_mapping", "example_id", "cls_index"])
    held = {example for example, holds in zip(train["example"], train["holds_answer"]) if holds}
    beyond = sum(bool(a["answer_start"]) and i not in held for i, a in enumerate(raw["train"]["answers"]))
    return EncodedData(train=train.remove_columns(["example", "holds_answer"]), validation=validation,
                       raw_validation=raw["validation"], eval_offsets=offsets, eval_example_ids=example_ids,
                       eval_cls=cls, answers_beyond_windows=beyond)


def answer_span(offset: list, sequence_ids: list, context_id: int, answers: dict, cls_index: int) -> tuple[int, int]:
    """The first and last token of a window that hold the answer's characters; ``(cls_index, cls_index)`` when the
    window does not hold the whole answer (or the question has none), as SQuAD fine-tuning marks it. Both ends are
    searched among the window's context tokens only: an answer at the context's very end starts on its own token,
    never on the ``[SEP]`` after it (whose offset, ``(0, 0)``, reads as "before the answer")."""
    first = sequence_ids.index(context_id)
    last = len(sequence_ids) - 1 - sequence_ids[::-1].index(context_id)
    if not answers["answer_start"]:
        return cls_index, cls_index
    char_start = answers["answer_start"][0]
    char_end = char_start + len(answers["text"][0])
    if offset[first][0] > char_start or offset[last][1] < char_end:
        return cls_index, cls_index  # the answer is outside this window
    start = first
    while start <= last and offset[start][0] <= char_start:
        start += 1
    end = last
    while end >= first and offset[end][1] >= char_end:
        end -= 1
    return start - 1, end + 1


def squad_predictions(encoded: EncodedData, start_logits: np.ndarray, end_logits: np.ndarray,
                      unanswerable: bool = False) -> tuple[dict[str, str], dict[str, float]]:
    """Answer text per question: the best valid span (start ≤ end, at most 30 tokens, inside the context) over
    the question's windows, scored by start + end logit, as the standard SQuAD post-processing does. With
    ``unanswerable`` questions (SQuAD v2): each question's null score (its windows' lowest [CLS] start + end logit)
    against its best span, "" (no answer) where the null scores higher, and the difference as its no-answer score
    (the official evaluation's ``na_prob``); without, no-answer scores are empty."""
    contexts = dict(zip(encoded.raw_validation["id"], encoded.raw_validation["context"]))
    best: dict[str, tuple[float, str]] = {}
    null: dict[str, float] = {}
    for feature, example_id in enumerate(encoded.eval_example_ids):
        offsets = encoded.eval_offsets[feature]
        starts, ends = start_logits[feature], end_logits[feature]
        if unanswerable:
            cls = encoded.eval_cls[feature] if encoded.eval_cls is not None else 0
            null[example_id] = min(null.get(example_id, np.inf), float(starts[cls] + ends[cls]))
        length = min(len(offsets), len(starts))
        start_top = np.argsort(starts[:length])[::-1][:N_BEST]
        end_top = np.argsort(ends[:length])[::-1][:N_BEST]
        for s in start_top:
            if offsets[s] is None:
                continue
            for e in end_top:
                if offsets[e] is None or e < s or e - s + 1 > MAX_ANSWER_TOKENS:
                    continue
                score = float(starts[s] + ends[e])
                if example_id not in best or score > best[example_id][0]:
                    best[example_id] = (score, contexts[example_id][offsets[s][0]:offsets[e][1]])
    if not unanswerable:
        return {qid: text for qid, (_, text) in best.items()}, {}
    scores = {qid: score - best[qid][0] if qid in best else score for qid, score in null.items()}
    return ({qid: "" if scores[qid] > 0 or qid not in best else best[qid][1] for qid in null}, scores)


def squad_references(encoded: EncodedData) -> dict[str, list[str]]:
    return {row["id"]: row["answers"]["text"] for row in encoded.raw_validation}
