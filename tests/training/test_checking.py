"""The one checker every format's table takes, called directly on tables as a reader leaves them."""

from __future__ import annotations

from pathlib import Path

import datasets

from istar_tune.tasks import task_from_mapping
from istar_tune.training.checking import normalise, rows_text, value_kind

FILES = {"train": Path("train.csv"), "validation": Path("dev.csv")}


def _task(tmp_path, **extra):
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text("text,label\n")
    return task_from_mapping({"name": "own", "train": "train.csv", "validation": "dev.csv", **extra}, tmp_path)


def test_dropped_rows_are_counted_and_a_bad_row_is_named_by_its_row_in_the_file(tmp_path):
    train = datasets.Dataset.from_dict({"text": ["a", "b", "c", "d", "e"], "label": ["pos", "-", "neg", "-", "pos"]})
    dev = datasets.Dataset.from_dict({"text": ["f", "g", "h"], "label": ["-", "neg", "maybe"]})
    problems: list[str] = []
    task, splits = normalise(_task(tmp_path, drop_labels=["-"]), {"train": train, "validation": dev}, FILES, problems)
    assert problems == ["dev.csv: rows 3: label 'maybe' is not one of neg, pos (the training split never shows it)"]
    # row 3 of the file, though its row 1 was dropped
    problems.clear()
    dev = datasets.Dataset.from_dict({"text": ["f", "g"], "label": ["-", "neg"]})
    task, splits = normalise(_task(tmp_path, drop_labels=["-"]), {"train": train, "validation": dev}, FILES, problems)
    assert not problems and task.dropped == (2, 1) and splits["train"]["label"] == [1, 0, 1]
    assert "2 train / 1 validation rows dropped (drop_labels: -)" in task.describe()


def test_a_qa_split_with_a_question_without_an_answer_is_squad_v2(tmp_path):
    rows = {"id": ["q1", "q2"], "question": ["Where?", "Who?"], "context": ["in Paris", "in Paris"],
            "answers": [{"text": ["Paris"], "answer_start": [3]}, {"text": [], "answer_start": []}]}
    table = datasets.Dataset.from_dict(rows)
    problems: list[str] = []
    task, _ = normalise(_task(tmp_path, problem_type="extractive_qa"), {"train": table, "validation": table}, FILES,
                        problems)
    assert not problems and task.unanswerable and "unanswerable questions (SQuAD v2" in task.describe()
    v1 = datasets.Dataset.from_dict({k: v[:1] for k, v in rows.items()})
    task, _ = normalise(_task(tmp_path, problem_type="extractive_qa"), {"train": v1, "validation": v1}, FILES, [])
    assert not task.unanswerable


def test_rows_and_kinds_as_a_refusal_names_them():
    assert rows_text([0, 1, 2, 3, 4, 5, 6]) == "1, 2, 3, 4, 5 and 2 more"
    assert [value_kind(v) for v in (1, 2.5, True, [1], {"a": 1}, "x")] == [
        "numbers", "numbers", "yes/no values", "lists", "mappings (nested objects)", "text"]
