"""Task definitions: every problem seen without the data at once, paths relative to the definition, and a definition
that rebuilds the same task anywhere."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.tasks import definition_mapping, load_task_file, task_from_mapping
from istar_tune.tasks.definition import looks_like_definition_path
from istar_tune.tasks.mapping import facts, task_from_facts
from istar_tune.tasks.registry import SHIPPED_ALIASES


def _files(folder, suffix=".csv"):
    for split in ("train", "dev"):
        (folder / f"{split}{suffix}").write_text("text,label\nhi,a\n")


def test_a_minimal_definition_takes_its_defaults_and_its_format_from_the_extension(tmp_path):
    _files(tmp_path, ".jsonl")
    task = task_from_mapping({"name": "tickets", "train": "train.jsonl", "validation": "dev.jsonl"}, tmp_path)
    assert (task.problem_type, task.metric, task.format, task.label_field) == ("classification", "accuracy",
                                                                                  "json", "label")
    assert task.files == {"train": str(tmp_path / "train.jsonl"), "validation": str(tmp_path / "dev.jsonl")}
    assert task.display_name == "tickets" and task.text_fields == () and not task.resolved
    qa = task_from_mapping({"name": "qa", "problem_type": "extractive_qa", "hub": "squad"})
    assert (qa.metric, qa.text_fields, qa.label_field, qa.hub.path) == ("f1", ("question", "context"), "answers",
                                                                        "squad")
    assert task_from_mapping({"name": "r", "problem_type": "regression", "hub": {"path": "x"}}).metric == "pearson"


def test_every_problem_at_once_each_naming_the_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: rte\ntrain: missing.csv\nvalidation: data\nmetric: pearson\ncolour: red\n"
                    "label_names: [a, b, c]\n")
    (tmp_path / "data").mkdir()
    with pytest.raises(ConfigError) as err:
        load_task_file(path, reserved=SHIPPED_ALIASES)
    text = str(err.value)
    for expected in ("colour: unknown key", "name: 'rte' is the name of a shipped task",
                     "metric: 'pearson' does not fit a classification task: choose one of accuracy, f1, f1_macro, mcc",
                     "missing.csv' does not exist", "(it is a folder)", "cannot tell the format"):
        assert expected in text, expected
    assert all(p.startswith(f"{path}: ") for p in err.value.problems)


@pytest.mark.parametrize(("extra", "message"), [
    ({"metric": "f1", "label_names": ["a", "b", "c"]}, "f1 is binary F1 (two classes); this task has 3"),
    ({"problem_type": "regression", "label_names": ["a"]}, "only a classification task has class names"),
    ({"hub": {"path": "x"}}, "give files or a hub data set, not both"),
    ({"format": "xlsx"}, "format: must be one of csv, tsv, json, parquet"),
    ({"text_fields": ["a", "b", "c"]}, "at most 2 (one text or a pair)"),
    ({"examples": {"train": 0}}, "examples: must map train/validation to positive counts"),
    ({"glue": {"header": True}}, "glue: belongs to format glue"),
    ({"text_fields": ["body", "body"]}, "text_fields: a field once, got"),
    ({"text_fields": ["body", "label"]}, "text_fields: 'label' is the label field: the model would read the answer"),
    ({"label_names": ["spam"]}, "label_names: a classifier needs two classes or more"),
    ({"format": "glue", "glue": {"num_columns": "abc"}}, "glue: num_columns: the number of columns every row has"),
    ({"format": "glue", "glue": {"columns": ["text"]}}, "glue: columns: a mapping of field to column"),
    ({"format": "glue", "glue": {"header": "no"}}, "glue: header: true or false"),
    ({"encoding": "latin-1", "format": "parquet"}, "encoding: only a text file's format (csv, tsv, json, lines) has an "
                                                   "encoding"),
])
def test_a_value_that_does_not_fit(tmp_path, extra, message):
    _files(tmp_path)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        task_from_mapping({"name": "t", "train": "train.csv", "validation": "dev.csv", **extra}, tmp_path)


def test_no_data_and_a_definition_that_is_no_mapping():
    with pytest.raises(ConfigError, match="give the data: train and validation files, or hub"):
        task_from_mapping({"name": "t"})
    with pytest.raises(ConfigError, match="a task definition is a mapping"):
        task_from_mapping(["name", "t"])


def test_a_definition_rebuilds_the_same_task_without_its_file(tmp_path):
    _files(tmp_path)
    task = task_from_mapping({"name": "t", "train": "train.csv", "validation": "dev.csv", "text_fields": "text",
                              "label_names": ["a", "b"], "examples": {"train": 1, "validation": 1},
                              "checksums": {"train": "sha256:1", "validation": "sha256:2"}}, tmp_path, source="x")
    again = task_from_mapping(definition_mapping(task), base_dir="/elsewhere", source="x")
    assert again == task


def test_what_names_a_file():
    assert looks_like_definition_path("./tickets.yaml") and looks_like_definition_path("tasks/x")
    assert looks_like_definition_path("t.YML") and not looks_like_definition_path("sst2")


@pytest.mark.parametrize(("extra", "message"), [
    ({"metric": "f1"}, "positive_label: metric f1 is the F1 of one class: name it with positive_label (one of its "
                       "two classes)"),
    ({"metric": "f1", "label_names": ["no", "yes"]}, "name it with positive_label: one of 'no', 'yes'"),
    ({"metric": "f1", "label_names": ["no", "yes"], "positive_label": "maybe"}, "'maybe' is not a class of this "
                                                                                 "task (no, yes)"),
    ({"metric": "accuracy", "positive_label": "yes"}, "only a binary F1 (metric: f1 on a classification) has a "
                                                      "positive class; this task's metric is accuracy"),
])
def test_a_binary_f1_names_its_positive_class(tmp_path, extra, message):
    with pytest.raises(ConfigError) as err:
        task_from_mapping({"name": "spam", "train": "a.csv", "validation": "b.csv", **extra}, source="spam.yaml")
    assert any(message in p for p in err.value.problems), err.value.problems


def test_the_positive_class_travels_with_the_definition_and_the_facts_tables_read(tmp_path):
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_text("text,label\nwin now,spam\nhello,ham\n")
    task = task_from_mapping({"name": "spam", "train": str(tmp_path / "a.csv"), "validation": str(tmp_path / "b.csv"),
                              "metric": "f1",
                              "label_names": ["ham", "spam"], "positive_label": "ham"}, source="spam.yaml")
    assert task.positive_index == 0 and task.metric_text == "f1 of 'ham'" and "metric f1 of 'ham'" in task.describe()
    assert definition_mapping(task)["positive_label"] == "ham"
    assert task_from_facts(facts(task), source="MLflow").metric_text == "f1 of 'ham'"


def test_yes_and_no_written_unquoted_as_class_names_are_refused_with_the_quoting_fix(tmp_path):
    # YAML 1.1 reads unquoted no/yes/on/off as booleans: {0: no, 1: yes} named the classes False and True, and
    # [no, yes] refused the data's own labels 'no' and 'yes'.
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text("text,label\na,no\nb,yes\n")
    for names in ("{0: no, 1: yes}", "[no, yes]"):
        (tmp_path / "task.yaml").write_text(f"name: answers\ntrain: train.csv\nvalidation: dev.csv\n"
                                            f"label_names: {names}\n")
        refused = r"label_names: \[False, True\] holds yes/no values where class names are expected: "
        with pytest.raises(ConfigError, match=refused + r".*quote each class name \(label_names: \['no', 'yes'\]\)"):
            load_task_file(tmp_path / "task.yaml")
    (tmp_path / "task.yaml").write_text("name: answers\ntrain: train.csv\nvalidation: dev.csv\nmetric: f1\n"
                                        "positive_label: yes\n")
    with pytest.raises(ConfigError, match=r"positive_label: must be a class name, got the yes/no value True: .*"
                                          r"quote it \(positive_label: 'yes'\)"):
        load_task_file(tmp_path / "task.yaml")
    (tmp_path / "task.yaml").write_text("name: answers\ntrain: train.csv\nvalidation: dev.csv\n"
                                        "label_names: ['no', 'yes']\nmetric: f1\npositive_label: 'yes'\n")
    task = load_task_file(tmp_path / "task.yaml")
    assert task.label_names == ("no", "yes") and task.positive_label == "yes"
