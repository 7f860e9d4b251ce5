from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr

from istar_tune.metrics import (
    accuracy,
    classification_metrics,
    matthews_corrcoef,
    normalize_answer,
    pearson,
    squad_scores,
)


def test_accuracy_and_binary_mcc_against_hand_computed_values():
    labels = [1, 1, 1, 0, 0, 0, 1, 0]
    preds = [1, 1, 0, 0, 0, 1, 1, 0]
    assert accuracy(preds, labels) == 0.75
    tp, tn, fp, fn = 3, 3, 1, 1
    expected = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert matthews_corrcoef(preds, labels) == pytest.approx(expected)
    assert matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction: undefined → 0


def test_pearson_matches_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    assert pearson(x, y) == pytest.approx(pearsonr(x, y).statistic)


def test_squad_scoring_follows_the_official_rules():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    refs = {"q1": ["Denver Broncos", "the Broncos"], "q2": ["Santa Clara, California"], "q3": ["1990"]}
    preds = {"q1": "broncos", "q2": "Santa Clara"}  # q3 unanswered scores 0
    scores = squad_scores(preds, refs)
    assert scores["exact_match"] == pytest.approx(100 / 3)  # "broncos" == normalised "the Broncos"
    f1_q2 = 2 * (1.0 * (2 / 3)) / (1.0 + 2 / 3)
    assert scores["f1"] == pytest.approx(100 * (1.0 + f1_q2 + 0.0) / 3)


def test_a_runs_score_is_its_scored_epochs_value_and_the_best_is_the_highest_with_ties_to_the_fewest_epochs():
    from istar_tune.metrics import best_scored, score

    assert score({"accuracy": 0.8}, "accuracy") == 0.8
    assert score({"accuracy": 0.8, "scored_accuracy": 0.7}, "accuracy") == 0.7
    assert score({"mcc": 0.3}, "accuracy") is None
    runs = [({"epochs": 5, "lr": 1}, 0.9), ({"epochs": 2, "lr": 1}, float("nan")), ({"epochs": 3, "lr": 2}, 0.9),
            ({"epochs": 3, "lr": 1}, 0.9), ({"epochs": 1, "lr": 1}, None), ({"epochs": 1, "lr": 2}, 0.5)]
    # Ties go to the configuration with fewest epochs, then by its values: whichever trial trained it.
    assert best_scored(runs, lambda r: r[0], lambda r: r[1]) == ({"epochs": 3, "lr": 1}, 0.9)
    assert best_scored(list(reversed(runs)), lambda r: r[0], lambda r: r[1]) == ({"epochs": 3, "lr": 1}, 0.9)
    # A NaN or missing score never wins, even when it comes first.
    assert best_scored([({"a": 1}, float("nan")), ({"b": 1}, 0.1)], lambda r: r[0], lambda r: r[1]) == ({"b": 1}, 0.1)
    assert best_scored([({"a": 1}, None)], lambda r: r[0], lambda r: r[1]) is None


def test_binary_and_macro_f1_from_their_counts():
    from istar_tune.metrics import f1_binary, f1_macro

    predictions, labels = [1, 1, 0, 0, 1, 2], [1, 0, 0, 1, 1, 2]
    # class 1: tp 2, fp 1, fn 1 → 2·2 / (3 + 3); class 0: tp 1, fp 1, fn 1 → 0.5; class 2: 1
    assert f1_binary(predictions, labels) == pytest.approx(4 / 6)
    assert f1_macro(predictions, labels) == pytest.approx((4 / 6 + 0.5 + 1.0) / 3)
    assert f1_macro([0, 0], [0, 0], num_classes=2) == pytest.approx(0.5)  # a class never seen scores 0
    assert f1_binary([0, 0], [0, 0]) == 0.0


def test_spearman_is_scipys():
    from scipy.stats import spearmanr

    from istar_tune.metrics import spearman

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50), rng.normal(size=50)
    y[:5] = y[5]  # ties
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0


# predictions 1, 1, 0, 0 against 1, 0, 0, 1: each class has tp 1, fp 1, fn 1 → F1 0.5
@pytest.mark.parametrize(("metric", "expected"), [("f1", 0.5), ("f1_macro", 0.5), ("mcc", 0.0), ("accuracy", 0.5)])
def test_a_classification_task_reports_its_metric_and_accuracy(metric, expected):
    from istar_tune.metrics import classification_metrics
    from istar_tune.tasks import Task

    task = Task(name="t", display_name="t", problem_type="classification", metric=metric, label_names=("a", "b"))
    logits = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    measured = classification_metrics(task, logits, np.array([1, 0, 0, 1]))
    assert list(measured)[0] == metric and measured[metric] == pytest.approx(expected)
    assert measured["accuracy"] == pytest.approx(0.5)


def test_a_tasks_binary_f1_is_of_its_positive_class():
    from istar_tune.tasks.task import Task

    logits = np.array([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])  # predicts ham, ham, spam, ham
    labels = np.array([0, 1, 1, 0])
    spam = Task("spam", "Spam", "classification", "f1", label_names=("ham", "spam"), positive_label="spam")
    ham = Task("spam", "Spam", "classification", "f1", label_names=("ham", "spam"), positive_label="ham")
    assert classification_metrics(spam, logits, labels)["f1"] == pytest.approx(2 / 3)  # tp 1, fp 0, fn 1
    assert classification_metrics(ham, logits, labels)["f1"] == pytest.approx(0.8)  # tp 2, fp 1, fn 0


def test_what_the_docs_state_of_absent_classes_and_constant_predictions():
    from istar_tune.metrics import f1_macro, spearman

    predictions, labels = np.array([0, 1, 0, 1]), np.array([0, 1, 1, 1])  # class 2 neither occurs nor is predicted
    per_class = [2 / 3, 0.8]
    assert f1_macro(predictions, labels, num_classes=3) == pytest.approx(sum(per_class) / 3)
    assert f1_macro(predictions, labels) == pytest.approx(sum(per_class) / 2)
    constant = np.zeros(4)
    assert pearson(constant, labels) == spearman(constant, labels) == matthews_corrcoef(np.zeros(4, int), labels) == 0


def test_squad_v2_by_the_official_rules_on_a_hand_made_set():
    """Two answerable and two unanswerable questions, computed by hand with the official v2 evaluation's rules: an
    empty prediction matches an unanswerable question; the no-answer scores over 1.0 count as "no answer"; the best
    threshold walks the questions in the order of their no-answer score."""
    from istar_tune.metrics import squad_v2_scores

    references = {"q1": ["Paris"], "q2": [], "q3": ["the Eiffel Tower", "Eiffel Tower"], "q4": []}
    predictions = {"q1": "Paris", "q2": "", "q3": "Tower", "q4": "London"}
    no_answer = {"q1": -2.0, "q2": 3.0, "q3": 0.5, "q4": -1.0}
    scores = squad_v2_scores(predictions, references, no_answer)
    assert scores["exact_match"] == pytest.approx(50.0) and scores["f1"] == pytest.approx(100 * (2 + 2 / 3) / 4)
    assert scores["has_ans_exact"] == pytest.approx(50.0) and scores["has_ans_f1"] == pytest.approx(100 * (5 / 6))
    assert scores["no_ans_exact"] == pytest.approx(50.0) and scores["no_ans_f1"] == pytest.approx(50.0)
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (pytest.approx(75.0), -2.0)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (pytest.approx(75.0), -2.0)
    # A no-answer score over the threshold turns an answerable question's right span into a miss.
    missed = squad_v2_scores(predictions, references, {**no_answer, "q1": 1.5})
    assert missed["has_ans_exact"] == pytest.approx(0.0)
    # Without unanswerable questions and no-answer scores, v2 scores as v1.
    v1 = {"q1": ["Paris"], "q3": ["Eiffel Tower"]}
    assert squad_v2_scores(predictions, v1, {})["f1"] == pytest.approx(squad_scores(predictions, v1)["f1"])


def test_every_metric_a_task_may_name_has_its_measure():
    from istar_tune.metrics import CLASSIFICATION_MEASURES, REGRESSION_MEASURES
    from istar_tune.tasks.task import CLASSIFICATION, METRICS, REGRESSION

    assert set(METRICS[CLASSIFICATION]) == set(CLASSIFICATION_MEASURES)
    assert set(METRICS[REGRESSION]) == set(REGRESSION_MEASURES)
