"""Task metrics: accuracy, binary and macro F1, Matthews correlation, Pearson, Spearman, and SQuAD v1.1 F1 / exact
match.

SQuAD scoring follows the official v1.1 evaluation script: answers are normalised (lower case, punctuation and
the articles a/an/the removed, whitespace collapsed), each prediction is scored against every gold answer and
the maximum is kept; both are reported in percent, as the official script does. The other metrics are
fractions in [0, 1] (Pearson and MCC in [−1, 1]).
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from istar_tune.tasks import CLASSIFICATION, EXTRACTIVE_QA, REGRESSION, Task


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float((predictions == labels).mean())


def matthews_corrcoef(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation for any number of classes (Gorodkin's R_K); 0 when it is undefined."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes = np.union1d(predictions, labels)
    index = {c: i for i, c in enumerate(classes)}
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for p, t in zip(predictions, labels):
        confusion[index[t], index[p]] += 1
    t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    cov_ytyp = correct * n - t_sum @ p_sum
    cov_ypyp = n * n - p_sum @ p_sum
    cov_ytyt = n * n - t_sum @ t_sum
    denom = np.sqrt(cov_ytyt * cov_ypyp)
    return float(cov_ytyp / denom) if denom > 0 else 0.0


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    predictions, labels = np.asarray(predictions, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if predictions.std() == 0 or labels.std() == 0:
        return 0.0
    return float(np.corrcoef(predictions, labels)[0, 1])


def normalize_answer(text: str) -> str:
    """The official SQuAD v1.1 answer normalisation."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, truth: str) -> float:
    pred_tokens, truth_tokens = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = collections.Counter(pred_tokens) & collections.Counter(truth_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: dict[str, str], references: dict[str, Sequence[str]]) -> dict[str, float]:
    """Official SQuAD v1.1 ``exact_match`` and ``f1`` (percent) of ``predictions`` (id → text) against
    ``references`` (id → gold answer texts). A question without a prediction scores 0, as in the official script."""
    if not references:
        return {"exact_match": 0.0, "f1": 0.0}
    exact = f1 = 0.0
    for qid, truths in references.items():
        prediction = predictions.get(qid, "")
        exact += max(float(normalize_answer(prediction) == normalize_answer(t)) for t in truths)
        f1 += max(_token_f1(prediction, t) for t in truths)
    return {"exact_match": 100.0 * exact / len(references), "f1": 100.0 * f1 / len(references)}


def squad_v2_scores(predictions: dict[str, str], references: dict[str, Sequence[str]],
                    no_answer_scores: dict[str, float], no_answer_threshold: float = 1.0) -> dict[str, float]:
    """SQuAD v2.0 by the official evaluation's rules (percent): ``references`` id → gold texts (none: unanswerable,
    whose one gold answer is the empty string); ``predictions`` id → text ("" predicts no answer);
    ``no_answer_scores`` id → how much the null answer beats the best span (a question whose score is over
    ``no_answer_threshold``, 1.0 as the official script's default, counts as predicted unanswerable). ``exact_match``
    and ``f1`` over every question, ``has_ans_*`` and ``no_ans_*`` over the answerable and unanswerable ones, and
    ``best_exact``/``best_f1`` with their thresholds: the null-score threshold the official script chooses (the one
    that maximises the score on these very questions, so it is reported beside, never used to choose). A question
    without a prediction is left out, as the official script leaves it out."""
    exact_raw, f1_raw, has_answer = {}, {}, {}
    for qid, truths in references.items():
        gold = [t for t in truths if normalize_answer(t)] or [""]
        has_answer[qid] = gold != [""]
        if qid not in predictions:
            continue
        exact_raw[qid] = max(float(normalize_answer(t) == normalize_answer(predictions[qid])) for t in gold)
        f1_raw[qid] = max(_v2_f1(predictions[qid], t) for t in gold)
    if not exact_raw:
        return {"exact_match": 0.0, "f1": 0.0}

    def thresholded(raw: dict[str, float]) -> dict[str, float]:
        return {qid: (float(not has_answer[qid]) if no_answer_scores.get(qid, 0.0) > no_answer_threshold else score)
                for qid, score in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    out = {"exact_match": 100.0 * sum(exact.values()) / len(exact), "f1": 100.0 * sum(f1.values()) / len(f1)}
    for name, keep in (("has_ans", True), ("no_ans", False)):
        ids = [q for q in exact if has_answer[q] == keep]
        if ids:
            out[f"{name}_exact"] = 100.0 * sum(exact[q] for q in ids) / len(ids)
            out[f"{name}_f1"] = 100.0 * sum(f1[q] for q in ids) / len(ids)
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
        out[f"best_{name}"], out[f"best_{name}_thresh"] = _best_threshold(predictions, raw, no_answer_scores,
                                                                          has_answer)
    return out


def _v2_f1(prediction: str, truth: str) -> float:
    """The official v2 token F1: an empty answer against an empty one is 1, against any other 0."""
    pred_tokens, truth_tokens = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred_tokens or not truth_tokens:
        return float(pred_tokens == truth_tokens)
    return _token_f1(prediction, truth)


def _best_threshold(predictions: dict[str, str], raw: dict[str, float], no_answer_scores: dict[str, float],
                    has_answer: dict[str, bool]) -> tuple[float, float]:
    """The official script's ``find_best_thresh``: questions in the order of their no-answer score, the threshold
    after each the one where predicting "no answer" for every question above it scores best."""
    current = best = float(sum(not has_answer[q] for q in raw))
    threshold = 0.0
    for qid in sorted(raw, key=lambda q: no_answer_scores.get(q, 0.0)):
        if has_answer[qid]:
            current += raw[qid]
        else:
            current += -1.0 if predictions[qid] else 0.0
        if current > best:
            best, threshold = current, no_answer_scores.get(qid, 0.0)
    return 100.0 * best / len(raw), threshold


def f1_binary(predictions: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """F1 of the ``positive`` class (GLUE's MRPC/QQP F1: class 1); 0 when it is never predicted nor true."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    true_positive = float(((predictions == positive) & (labels == positive)).sum())
    predicted, actual = float((predictions == positive).sum()), float((labels == positive).sum())
    return 2 * true_positive / (predicted + actual) if predicted + actual else 0.0


def f1_macro(predictions: Sequence[int], labels: Sequence[int], num_classes: int | None = None) -> float:
    """The unweighted mean of every class's F1 (classes ``0..num_classes-1``, else those that occur)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes = range(num_classes) if num_classes else np.union1d(predictions, labels)
    return float(np.mean([f1_binary(predictions, labels, int(c)) for c in classes]))


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson of the ranks, ties averaged); 0 when it is undefined."""
    from scipy.stats import rankdata

    return pearson(rankdata(np.asarray(predictions, dtype=np.float64)), rankdata(np.asarray(labels, dtype=np.float64)))


CLASSIFICATION_MEASURES: dict[str, Callable[[np.ndarray, np.ndarray, Task], float]] = {
    "accuracy": lambda predictions, labels, task: accuracy(predictions, labels),
    "mcc": lambda predictions, labels, task: matthews_corrcoef(predictions, labels),
    "f1": lambda predictions, labels, task: f1_binary(predictions, labels, task.positive_index),
    "f1_macro": lambda predictions, labels, task: f1_macro(predictions, labels, task.num_labels),
}
"""A classification task's metric by name, from its predicted and true class indices (a new one: a function here and
its name in :data:`istar_tune.tasks.task.METRICS`)."""
REGRESSION_MEASURES: dict[str, Callable[[Sequence[float], Sequence[float]], float]] = {
    "pearson": pearson, "spearman": spearman}
"""A regression task's metric by name, from predicted and true scores."""


def classification_metrics(task: Task, logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metric (and accuracy beside a classification metric that is not accuracy) from model outputs
    (logits (n, num_labels), or (n, 1) scores for regression)."""
    if task.problem_type == REGRESSION:
        return {task.metric: REGRESSION_MEASURES[task.metric](logits.reshape(-1), labels)}
    if task.problem_type != CLASSIFICATION:
        raise ValueError(f"classification_metrics does not apply to {task.problem_type} task {task.name}")
    predictions = logits.argmax(axis=-1)
    return {task.metric: CLASSIFICATION_MEASURES[task.metric](predictions, labels, task),
            **({"accuracy": accuracy(predictions, labels)} if task.metric != "accuracy" else {})}


HOLDOUT_PREFIX = "holdout_"
"""Prefix of the measures on the held-out training examples (the ``holdout`` setting)."""
CHOOSE_BY = ("auto", "dev", "holdout")
"""What chooses a seeds stage's configurations: ``auto`` (the held-out training examples where the runs have them,
else the dev set: :func:`choosing_score`), the validation (dev) set (refused for runs with held-out data), or the
held-out training examples (refused for runs without)."""
FINETUNED_PREFIX = "finetuned_"
"""Prefix of what a two-stage method's records say of its first stage's model (IsoLayer: the fine-tuned LM without
the layer, its paper's "Finetuned LM" row): the task metric, the sentence IsoScore and EV_1..EV_3."""
SCORED_PREFIX = "scored_"
"""Prefix of the measures of a run's scored epoch, reported by runs that choose it on held-out training data."""
CLOSING_ONLY = "closing_only"
"""Key of an epoch record whose :data:`STAR_KEYS` were measured only because a shorter configuration ends at that
epoch (a shared trial): the run of a longer configuration leaves them out of that epoch, as its own run would."""
STAR_KEYS = ("eval_isoscore_star", "eval_zeta")


def score(values: Mapping[str, float], metric: str) -> float | None:
    """A run's (or an epoch record's) score on ``metric``: its value at the scored epoch (``scored_<metric>``, where
    the run chooses that epoch on held-out data) or else its value after the last epoch. The one rule of every
    table, of the best trial a seeds stage re-runs and of the search's objective."""
    value = values.get(SCORED_PREFIX + metric)
    return values.get(metric) if value is None else value


def choosing_score(values: Mapping[str, float], metric: str) -> float | None:
    """The value that chooses among configurations (and that Tune's schedulers and searchers see): with held-out
    data, the held-out metric at the scored epoch (an epoch record's: the best held-out value so far); else
    :func:`score`, the dev metric. The one choosing rule of the search's objective, its summary, the tables, ``status``,
    the seeds stage and the replay: where a run held data out, the dev set only scores."""
    held = score(values, HOLDOUT_PREFIX + metric)
    return score(values, metric) if held is None else held


def chosen_on(values: Mapping[str, float], metric: str) -> str:
    """``holdout`` where :func:`choosing_score` reads held-out data for these values, else ``dev``."""
    return "holdout" if score(values, HOLDOUT_PREFIX + metric) is not None else "dev"


def choice_metric(metric: str, choose_by: str = "auto") -> str:
    """The measure configurations are chosen by: the task metric on the dev set, or on the held-out examples (``auto``
    names the dev metric: the runs decide, see :func:`choosing_score`)."""
    return HOLDOUT_PREFIX + metric if choose_by == "holdout" else metric


def choosing(values: Mapping[str, float], metric: str, choose_by: str = "auto") -> float | None:
    """A run's value under a seeds stage's ``choose_by``: ``auto`` is :func:`choosing_score`."""
    if choose_by == "auto":
        return choosing_score(values, metric)
    return score(values, choice_metric(metric, choose_by))


T = TypeVar("T")


def tie_order(config: Mapping[str, Any]) -> tuple:
    """The order among configurations with the same score: fewest epochs first (the cheaper), then by their values.
    A property of the configuration, not of the trial that trained it, so a grid run shared or unshared, resumed or
    not, chooses the same one."""
    return int(float(config.get("epochs") or 0)), sorted((str(k), str(v)) for k, v in config.items())


def best_scored(items: Iterable[T], config: Callable[[T], Mapping[str, Any]],
                value: Callable[[T], float | None]) -> T | None:
    """The item with the highest score, ties to the configuration first in :func:`tie_order`; items without a score
    (or a NaN one) never win. The one rule of the tables, of the seeds stage's choice from MLflow and of its choice
    within a running search."""
    best, best_value = None, -math.inf
    for item in sorted(items, key=lambda i: tie_order(config(i))):
        current = value(item)
        if current is not None and not math.isnan(current) and (best is None or current > best_value):
            best, best_value = item, current
    return best


__all__ = [
    "accuracy",
    "f1_binary",
    "f1_macro",
    "spearman",
    "matthews_corrcoef",
    "pearson",
    "normalize_answer",
    "squad_scores",
    "squad_v2_scores",
    "classification_metrics",
    "score",
    "best_scored",
    "SCORED_PREFIX",
    "HOLDOUT_PREFIX",
    "FINETUNED_PREFIX",
    "choice_metric",
    "choosing",
    "choosing_score",
    "chosen_on",
    "EXTRACTIVE_QA",
]
