"""The one checker every format's table takes, called directly on tables as a reader leaves them."""

from __future__ import annotations

from pathlib import Path

import datasets

from istar_tune.data.checking import normalise
from istar_tune.tasks import task_from_mapping

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


def test_every_check_runs_again_after_drop_labels_and_a_declared_placeholder_is_a_class(tmp_path):
    train = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": ["x", "y", "x"]})
    dev = datasets.Dataset.from_dict({"text": ["d", "e"], "label": ["z", "z"]})
    problems: list[str] = []
    normalise(_task(tmp_path, drop_labels=["z"]), {"train": train, "validation": dev}, FILES, problems)
    assert problems == ["dev.csv: drop_labels ['z'] drops every row of the validation split: nothing is left; drop "
                        "fewer labels"]  # it ended in KeyError: 'logits' after an epoch
    problems.clear()
    normalise(_task(tmp_path, drop_labels=["y"]), {"train": train, "validation": train}, FILES, problems)
    assert problems == ["train.csv: every training label is 'x': a classifier needs two classes or more (check "
                        "label_field, or the file)"]
    problems.clear()
    placeholders = datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["-", "-"]})
    normalise(_task(tmp_path), {"train": placeholders, "validation": dev}, FILES, problems)
    assert problems[0] == ("train.csv: no row has a label (every one is '-'): is label_field the label column, and "
                           "are the file's fields separated as its format says?")  # not "drop them": nothing left
    problems.clear()
    named = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": ["none", "some", "none"]})
    task, splits = normalise(_task(tmp_path, label_names=["none", "some"]), {"train": named, "validation": named},
                             FILES, problems)
    assert not problems and splits["train"]["label"] == [0, 1, 0]  # declared: a class, not a missing label


def test_a_constant_score_and_halves_among_whole_classes_are_refused_with_their_way_out(tmp_path):
    same = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [2.5, 2.5]})
    varied = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [1.5, 2.5]})
    problems: list[str] = []
    normalise(_task(tmp_path, problem_type="regression"), {"train": same, "validation": varied}, FILES, problems)
    assert problems == ["train.csv: every training score is 2.5: nothing to learn: is label_field the score?"]
    problems.clear()
    normalise(_task(tmp_path, problem_type="regression"), {"train": varied, "validation": same}, FILES, problems)
    assert problems == ["dev.csv: every validation score is 2.5: pearson is undefined on a constant: is label_field "
                        "the score?"]
    problems.clear()
    whole = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": [1, 2, 3]})
    normalise(_task(tmp_path), {"train": whole, "validation": varied}, FILES, problems)
    assert problems == ["dev.csv: rows 1, 2: labels '1.5', '2.5' are not one of 1, 2, 3 (the training split never "
                        "shows them); scores with decimals? say problem_type: regression (--problem-type regression)"]


def test_a_text_field_of_numbers_only_is_refused_however_written(tmp_path):
    for codes in (["7", "08", "1e3"], [7, 8, 1000]):  # text in a csv or JSON strings; JSON numbers
        table = datasets.Dataset.from_dict({"text": codes, "label": ["pos", "neg", "pos"]})
        problems: list[str] = []
        normalise(_task(tmp_path), {"train": table, "validation": table}, FILES, problems)
        assert problems and all("text field 'text' holds numbers" in p for p in problems), problems
    mixed = datasets.Dataset.from_dict({"text": ["7", "a fine film", "10/10"], "label": ["pos", "neg", "pos"]})
    problems = []
    normalise(_task(tmp_path), {"train": mixed, "validation": mixed}, FILES, problems)
    assert problems == []  # a review that is a number among reviews is text
