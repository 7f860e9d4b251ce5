from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.tasks import TASKS, get_task


def test_registry_holds_the_nine_tasks_with_their_metrics():
    assert sorted(TASKS) == sorted(["sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad"])
    assert {t.name: t.metric for t in TASKS.values()} == {
        "sst2": "accuracy", "qnli": "accuracy", "rte": "accuracy", "mrpc": "accuracy", "qqp": "accuracy",
        "cola": "mcc", "stsb": "pearson", "sst5": "accuracy", "squad": "f1"}
    assert get_task("stsb").num_labels == 1 and get_task("stsb").problem_type == "regression"
    assert get_task("sst5").num_labels == 5
    assert get_task("squad").metrics == ("f1", "exact_match")


@pytest.mark.parametrize("alias", ["SST-2", "sst-2", "sst2", " Sst2 "])
def test_aliases(alias):
    assert get_task(alias).name == "sst2"


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown task 'mnli': choose one of sst2, qnli"):
        get_task("mnli")
