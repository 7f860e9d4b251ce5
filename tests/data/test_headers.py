"""A header read as data, wherever it stands and however it is spelled: the header again after a byte-order mark or
in quotes (two Excel "CSV UTF-8" exports concatenated), in every format; a file's own header under the names
``column_names`` gives it; and the one case that cannot be told, left to a declaration."""

from __future__ import annotations

import json

import pytest

from istar_tune.data.reading import read_task
from istar_tune.errors import ConfigError
from istar_tune.tasks import task_from_mapping

ROWS = [("good film", "pos"), ("bad film", "neg"), ("fine film", "pos"), ("dull film", "neg")]


def _csv(rows) -> str:
    return "".join(f"{text},{label}\n" for text, label in rows)


@pytest.mark.parametrize("again", ["text,label\n", "\ufefftext,label\n", '\ufeff"text","label"\n', 'Text,"LABEL"\n',
                                   "\ufeff\ufefftext , label\n"])
def test_the_header_again_after_a_byte_order_mark_or_in_quotes_is_refused(tmp_path, again):
    # Two exports concatenated: the second one's header began with a BOM and trained a class named 'label'.
    (tmp_path / "train.csv").write_text("text,label\n" + _csv(ROWS[:2]) + again + _csv(ROWS[2:]), encoding="utf-8")
    (tmp_path / "dev.csv").write_text("text,label\n" + _csv(ROWS[:2]), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_task(task_from_mapping({"name": "twice", "train": "train.csv", "validation": "dev.csv"}, tmp_path))
    assert any("rows 3: the row holds the fields' own names" in p for p in err.value.problems), err.value.problems


def test_the_header_again_in_json_lines_is_refused(tmp_path):
    rows = [{"text": t, "label": y} for t, y in ROWS]
    rows.insert(2, {"text": "\ufefftext", "label": "label"})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "dev.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ConfigError, match="rows 3: the row holds the fields' own names"):
        read_task(task_from_mapping({"name": "twice", "train": "train.jsonl", "validation": "dev.jsonl"}, tmp_path))


def test_column_names_given_to_a_file_with_its_own_header_is_refused(tmp_path):
    # `column_names: [text, label]` over `review,sentiment` trained the header row as data (a class 'sentiment').
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text("review,sentiment\n" + _csv(ROWS), encoding="utf-8")
    definition = {"name": "renamed", "train": "train.csv", "validation": "dev.csv", "column_names": ["text", "label"]}
    with pytest.raises(ConfigError) as err:
        read_task(task_from_mapping(definition, tmp_path))
    assert any("row 1 (review, sentiment) looks like the file's own header" in p and "leave column_names out" in p
               for p in err.value.problems), err.value.problems
    # The right reading: the header as a header.
    task, splits = read_task(task_from_mapping({"name": "renamed", "train": "train.csv", "validation": "dev.csv",
                                                "text_fields": ["review"], "label_field": "sentiment"}, tmp_path))
    assert task.label_names == ("neg", "pos") and len(splits["train"]) == 4


def test_a_first_row_of_one_word_whose_class_occurs_once_is_data_once_the_classes_are_declared(tmp_path):
    # The case the rule cannot tell from a header: it refuses, and a declaration of the classes settles it.
    rows = [("wow", "great")] + ROWS
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text(_csv(rows), encoding="utf-8")
    definition = {"name": "headerless", "train": "train.csv", "validation": "dev.csv",
                  "column_names": ["text", "label"]}
    with pytest.raises(ConfigError, match="declare the classes with label_names"):
        read_task(task_from_mapping(definition, tmp_path))
    task, splits = read_task(task_from_mapping({**definition, "label_names": ["great", "neg", "pos"]}, tmp_path))
    assert splits["train"]["text"][0] == "wow" and task.label_names[splits["train"]["label"][0]] == "great"
