"""SQuAD's nested JSON: told from a table of rows by its nesting, one row a question, a file that is not SQuAD said."""

from __future__ import annotations

import json

import pytest

from istar_tune.data.squad import looks_like_squad, parse_squad
from istar_tune.errors import DataError
from istar_tune.tasks import Task, task_from_mapping


def _squad(path, questions):
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": "Paris is in France.", "qas": questions}]}]}), encoding="utf-8")
    return path


def test_squads_nesting_is_told_from_rows_and_flattened_one_row_a_question(tmp_path):
    path = _squad(tmp_path / "train.json", [{"id": "q1", "question": "Where is Paris?",
                                             "answers": [{"text": "France", "answer_start": 12}]},
                                            {"id": "q2", "question": "What is it?", "answers": []}])
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"data": "x", "paragraphs": 1}]))
    assert looks_like_squad(path) and not looks_like_squad(rows) and not looks_like_squad(tmp_path / "none.json")
    columns = parse_squad(Task("q", "Q", "extractive_qa", "f1"), path)
    assert columns["id"] == ["q1", "q2"] and columns["answers"][0] == {"text": ["France"], "answer_start": [12]}
    assert columns["answers"][1] == {"text": [], "answer_start": []}
    task = task_from_mapping({"name": "q", "train": str(path), "validation": str(path)})
    assert (task.format, task.problem_type) == ("squad", "extractive_qa")  # the .json file is claimed by SQuAD


def test_a_file_that_is_not_squad_is_said(tmp_path):
    broken = tmp_path / "b.json"
    broken.write_text(json.dumps({"data": [{"paragraphs": [{"context": "c"}]}]}))
    with pytest.raises(DataError, match=r"b.json: not a SQuAD file \(KeyError: 'qas'\)"):
        parse_squad(Task("q", "Q", "extractive_qa", "f1"), broken)
    empty = _squad(tmp_path / "e.json", [])
    with pytest.raises(DataError, match="e.json: no questions"):
        parse_squad(Task("q", "Q", "extractive_qa", "f1"), empty)


def test_a_squad_file_with_a_byte_order_mark_is_read(tmp_path):
    path = _squad(tmp_path / "train.json", [{"id": "q1", "question": "Where is Paris?",
                                             "answers": [{"text": "France", "answer_start": 12}]}])
    path.write_text("\ufeff" + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert looks_like_squad(path)
    assert parse_squad(Task("q", "Q", "extractive_qa", "f1"), path)["id"] == ["q1"]
