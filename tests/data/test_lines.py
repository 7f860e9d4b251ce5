"""Parallel files: a split as a mapping of field to file, one row a line in each; counts that differ refused, lines
split at \\n only."""

from __future__ import annotations

import pytest

from istar_tune.data.reading import read_task
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks import definition_mapping, task_from_mapping


def _write(folder, name, lines, end="\n"):
    path = folder / name
    path.write_bytes((end.join(lines) + end).encode("utf-8"))
    return path


def test_parallel_files_read_as_rows_by_line(tmp_path):
    premises = ["A man sleeps.", "Two dogs run\u2028in a park.", "It rains.", "Nobody came."]  # U+2028 is text
    _write(tmp_path, "train.premise", premises, "\r\n")  # CRLF: the \r goes with the line break
    _write(tmp_path, "train.hypothesis", ["He is awake.", "Animals move.", "It is wet.", "The room was empty."])
    _write(tmp_path, "train.label", ["contradiction", "entailment", "entailment", "entailment"])
    split = {"premise": "train.premise", "hypothesis": "train.hypothesis", "label": "train.label"}
    task = task_from_mapping({"name": "nli", "train": split, "validation": split,
                              "text_fields": ["premise", "hypothesis"]}, tmp_path)
    assert task.format == "lines"  # splits given as mappings say it
    resolved, splits = read_task(task)
    assert splits["train"]["premise"] == premises and splits["train"]["label"] == [0, 1, 1, 1]
    assert resolved.label_names == ("contradiction", "entailment") and resolved.read_examples == (4, 4)
    again = task_from_mapping(definition_mapping(resolved), None)  # what a trial on another node rebuilds
    assert again.files == resolved.files and read_task(again)[0].checksums == resolved.checksums
    _write(tmp_path, "train.label", ["contradiction", "entailment", "entailment", "neutral"])  # changed since
    with pytest.raises(ConfigError, match="train file .*: changed since the task was resolved"):
        read_task(again)


def test_line_counts_that_differ_are_refused_naming_each(tmp_path):
    _write(tmp_path, "t.text", ["a", "b", "c"])
    _write(tmp_path, "t.label", ["1", "0"])
    split = {"text": "t.text", "label": "t.label"}
    with pytest.raises(DataError, match=r"parallel files with different line counts \(t.text \(text\) 3, t.label "
                                        r"\(label\) 2\): each file holds one line a row"):
        read_task(task_from_mapping({"name": "p", "train": split, "validation": split}, tmp_path))


@pytest.mark.parametrize(("given", "said"), [
    ({"train": {"text": "t.text", "label": "t.label"}, "validation": "t.text"},
     "format: lines: give each split as a mapping of field to file"),
    ({"train": {"text": "t.text", "label": "t.label"}, "validation": {"label": "t.label", "text": "t.text"}},
     "validation: the same fields as train, in the same order (text, label), got label, text"),
    ({"train": {"text": "t.text", "label": "t.label"}, "validation": {"text": "t.text", "label": "t.label"},
      "format": "csv"}, "format: a split given as a mapping of field to file is read as parallel files"),
    ({"train": {"text": "t.text", "label": "none.label"}, "validation": {"text": "t.text", "label": "t.label"}},
     "train.label: file .*none.label' does not exist"),
])
def test_a_split_that_is_not_parallel_files_is_refused(tmp_path, given, said):
    _write(tmp_path, "t.text", ["a", "b"])
    _write(tmp_path, "t.label", ["1", "0"])
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        task_from_mapping({"name": "p", **given}, tmp_path)
