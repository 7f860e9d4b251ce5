"""One label rule for every format."""

from __future__ import annotations

import pytest

from istar_tune.errors import DataError
from istar_tune.tasks import Task
from istar_tune.tasks.labels import distinct_labels, label_value

CLASSES = Task(name="t", display_name="T", problem_type="classification", metric="accuracy",
               label_names=("negative", "positive"))
STARS = Task(name="s", display_name="S", problem_type="classification", metric="accuracy",
             label_names=("1", "2", "3"))
SCORES = Task(name="r", display_name="R", problem_type="regression", metric="pearson")


def test_a_class_by_its_name_or_its_index():
    assert label_value(CLASSES, "positive", "f:2") == 1 and label_value(CLASSES, 0, "f:2") == 0
    assert label_value(CLASSES, "1", "f:2") == 1 and label_value(CLASSES, 1.0, "f:2") == 1
    assert label_value(STARS, 1, "f:2") == 0  # a name first: star "1" is the first class, not index 1
    with pytest.raises(DataError, match="f:9: label 'neutral' is not one of negative, positive"):
        label_value(CLASSES, "neutral", "f:9")
    with pytest.raises(DataError, match="label '2' is not one of"):
        label_value(CLASSES, 2, "f:9")


def test_a_score_is_a_finite_number():
    assert label_value(SCORES, "3.8", "f:2") == 3.8 and label_value(SCORES, 4, "f:2") == 4.0
    with pytest.raises(DataError, match="score 'high' is not a number"):
        label_value(SCORES, "high", "f:3")
    with pytest.raises(DataError, match="not a finite number"):
        label_value(SCORES, "nan", "f:3")


def test_class_names_read_from_data_are_sorted_numerically_when_numbers():
    assert distinct_labels(["b", "a", "b", None]) == ("a", "b")
    assert distinct_labels([10, 2, 1, 2.0]) == ("1", "2", "10")
    assert distinct_labels([True, False]) == ("False", "True")
