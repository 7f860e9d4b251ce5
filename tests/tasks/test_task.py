"""What a task is: its class count, the metrics it reports and whether it is known without reading its data."""

from __future__ import annotations

import pytest

from istar_tune.tasks import METRICS, Task


def _task(**values) -> Task:
    return Task(**{"name": "t", "display_name": "T", "problem_type": "classification", "metric": "accuracy",
                   **values})


def test_labels_and_metrics_per_problem_type():
    assert _task(label_names=("a", "b", "c")).num_labels == 3
    assert _task(problem_type="regression", metric="spearman").num_labels == 1
    assert _task(problem_type="extractive_qa", metric="exact_match").metrics == ("exact_match", "f1")
    assert _task(metric="f1_macro").metrics == ("f1_macro",)
    assert set(METRICS) == {"classification", "regression", "extractive_qa"}


@pytest.mark.parametrize(("values", "resolved"), [
    ({}, False),
    ({"label_names": ("a", "b")}, False),  # sizes not known yet
    ({"label_names": ("a", "b"), "train_examples": 10, "eval_examples": 5}, True),
    ({"problem_type": "regression", "metric": "pearson", "train_examples": 10, "eval_examples": 5}, True),
])
def test_resolved_means_classes_and_sizes_are_known(values, resolved):
    assert _task(**values).resolved is resolved


def test_a_regressions_line_says_its_scores_train_as_z_scores():
    line = Task("own", "Own", "regression", "pearson", observed_scores=(0.0, 100.0)).describe()
    assert "scores 0 to 100 (trained as z-scores)" in line



def test_a_splits_source_names_its_file_its_parallel_files_or_the_share_drawn():
    one = Task("t", "T", "classification", "accuracy", files={"train": "/d/train.csv", "validation": "/d/dev.csv"})
    assert (one.split_source("train"), one.split_source("validation")) == ("/d/train.csv", "/d/dev.csv")
    drawn = Task("t", "T", "classification", "accuracy", files={"train": "/d/all.csv"}, validation_split=0.1,
                 split_seed=3)
    assert drawn.split_source("validation") == "/d/all.csv (validation_split 0.1, split_seed 3)"
    lines = Task("t", "T", "classification", "accuracy", files={"train": {"text": "/d/t.txt", "label": "/d/t.lab"}})
    assert lines.split_source("train") == "/d/t.txt, /d/t.lab" and lines.split_source("validation") == ""
