"""The tasks a process knows: the shipped paper tasks (definitions of the same kind as a user's), references by name,
file or inline mapping, one definition per name, and what readers of MLflow learn from a run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from istar_tune.errors import ConfigError
from istar_tune.tasks import TASKS, facts, get_task, register_task, remember_facts, task_names, task_reference


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


def test_a_reference_is_a_name_a_definition_file_or_an_inline_definition(tmp_path):
    _definition(tmp_path)
    by_file = task_reference("tickets.yaml", tmp_path)
    assert by_file.name == "tickets" and by_file.files["train"] == str(tmp_path / "train.csv")
    assert get_task("tickets") is by_file and task_reference("tickets") is by_file  # registered by its name
    inline = task_reference({"name": "inline", "train": "train.csv", "validation": "dev.csv"}, tmp_path,
                            source="space.yaml: tasks[1]")
    assert inline.source == "space.yaml: tasks[1]" and "inline" in task_names()
    assert task_reference("RTE") is TASKS["rte"]
    with pytest.raises(ConfigError, match="task definition 'nowhere.yaml' does not exist"):
        task_reference("nowhere.yaml")


def test_a_name_is_taken_once(tmp_path):
    first = task_reference(_definition(tmp_path).name, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match="two different task definitions are named 'tickets'"):
        task_reference(_definition(other), other)
    assert get_task("tickets") is first
    assert task_reference(_definition(tmp_path).name, tmp_path) is first  # the same definition again: the same task
    with pytest.raises(ConfigError, match="'SST-2' is the name of a shipped task"):
        task_reference({"name": "SST-2", "train": "train.csv", "validation": "dev.csv"}, tmp_path)


def test_a_resolved_copy_replaces_its_definition_and_readers_learn_a_task_from_its_facts(tmp_path):
    task = task_reference(_definition(tmp_path).name, tmp_path)
    resolved = replace(task, label_names=("a", "b"), train_examples=2, eval_examples=2, infer_problem_type=False,
                       inferred="labels are words")
    assert register_task(resolved) is resolved  # resolution adds what the data says: the same task
    assert remember_facts(facts(resolved), "MLflow") is resolved  # a reader's facts agree: the definition stays
    learnt = remember_facts({"name": "tickets", "display_name": "Tickets", "problem_type": "classification",
                             "metric": "f1_macro"}, "MLflow")
    assert get_task("tickets") is learnt and learnt.metric == "f1_macro"  # the experiment's own word wins
    assert remember_facts({"name": "rte", "display_name": "x", "problem_type": "regression", "metric": "pearson"},
                          "MLflow") is TASKS["rte"]
