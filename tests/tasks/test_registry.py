"""The tasks a process knows by name: the shipped paper tasks (definitions of the same kind as a user's) and nothing
else; references by name, file or inline mapping, and a caller's own tasks looked up among those it holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from istar_tune.errors import ConfigError
from istar_tune.tasks import TASKS, get_task, task_names, task_of


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
    with pytest.raises(ConfigError, match="unknown task 'mnli': choose one of sst2, qnli.*or give a task definition"):
        get_task("mnli")


def test_every_shipped_task_is_a_definition_of_the_same_kind_as_a_users():
    for task in TASKS.values():
        assert task.shipped and task.source == "shipped" and task.files_in == "data_dir"
        assert task.resolved  # class names and the published sizes are given: a dry run reads no data
    assert get_task("mrpc").glue.columns == {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"}
    assert get_task("sst5").hub.columns == {"text": "sentence"}


def _definition(tmp_path, name="tickets", **extra) -> Path:
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\nhello,a\nbye,b\n")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "train": "train.csv", "validation": "dev.csv", **extra}))
    return path


def test_a_reference_is_a_name_a_definition_file_or_an_inline_definition_and_nothing_is_registered(tmp_path):
    _definition(tmp_path)
    by_file = task_of("tickets.yaml", tmp_path)
    assert by_file.name == "tickets" and by_file.files["train"] == str(tmp_path / "train.csv")
    with pytest.raises(ConfigError, match="unknown task 'tickets': choose one of sst2, "):
        get_task("tickets")  # reading a definition makes no name known to the process
    assert task_names() == list(TASKS)
    assert get_task("tickets", {"tickets": by_file}) is by_file  # the caller's own tasks, by name
    assert task_of("tickets", known={"tickets": by_file}) is by_file
    with pytest.raises(ConfigError, match="choose one of sst2, .*, squad, tickets, or give"):
        get_task("reviews", {"tickets": by_file})
    inline = task_of({"name": "inline", "train": "train.csv", "validation": "dev.csv"}, tmp_path,
                     source="space.yaml: tasks[1]")
    assert inline.source == "space.yaml: tasks[1]" and task_of("RTE") is TASKS["rte"]
    with pytest.raises(ConfigError, match="task definition 'nowhere.yaml' does not exist"):
        task_of("nowhere.yaml")


def test_a_definition_may_not_take_a_shipped_tasks_name(tmp_path):
    with pytest.raises(ConfigError, match="'SST-2' is the name of a shipped task"):
        task_of({"name": "SST-2", "train": "train.csv", "validation": "dev.csv"}, tmp_path)
