"""One file as both splits: drawn by a seed, each class keeping its share; what the draw leaves checked again; the
draw the same wherever the definition is rebuilt."""

from __future__ import annotations

from collections import Counter

import pytest

from istar_tune.data.reading import read_task
from istar_tune.errors import ConfigError, IstarTuneError
from istar_tune.tasks import definition_mapping, task_from_mapping


def _file(tmp_path, counts: dict[str, int]):
    rows = [f"{label} example {i},{label}" for label, n in counts.items() for i in range(n)]
    (tmp_path / "all.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    return {"name": "one", "train": "all.csv"}


def test_a_share_is_drawn_by_its_seed_and_each_class_keeps_its_share(tmp_path):
    raw = _file(tmp_path, {"common": 80, "rare": 20})
    task, splits = read_task(task_from_mapping({**raw, "validation_split": 0.2}, tmp_path))
    names = task.label_names
    shares = {s: Counter(names[i] for i in splits[s]["label"]) for s in ("train", "validation")}
    assert shares == {"train": {"common": 64, "rare": 16}, "validation": {"common": 16, "rare": 4}}
    assert task.read_examples == (80, 20) and task.checksums["train"] == task.checksums["validation"]
    texts = set(splits["train"]["text"])
    assert texts.isdisjoint(splits["validation"]["text"]) and len(texts | set(splits["validation"]["text"])) == 100
    again = read_task(task_from_mapping(definition_mapping(task), None))[1]  # rebuilt elsewhere: the same draw
    assert again["validation"]["text"] == splits["validation"]["text"]
    other = read_task(task_from_mapping({**raw, "validation_split": 0.2, "split_seed": 1}, tmp_path))[1]
    assert other["validation"]["text"] != splits["validation"]["text"]
    counted = read_task(task_from_mapping({**raw, "validation_split": 10}, tmp_path))[1]
    assert len(counted["validation"]) == 10 and len(counted["train"]) == 90


def test_a_regression_file_is_drawn_at_random(tmp_path):
    rows = [f"pair {i},{i % 7 / 2}" for i in range(40)]
    (tmp_path / "s.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    task, splits = read_task(task_from_mapping({"name": "s", "train": "s.csv", "validation_split": 0.25,
                                                "problem_type": "regression"}, tmp_path))
    assert (len(splits["train"]), len(splits["validation"])) == (30, 10) and task.problem_type == "regression"


@pytest.mark.parametrize(("extra", "counts", "said"), [
    ({"validation_split": 0.2}, {"a": 10, "b": 1}, "class(es) 'b' have one example: a stratified split keeps two"),
    ({"validation_split": 11}, {"a": 5, "b": 5}, "11 validation rows of the 10 the file holds leave no training row"),
    ({"validation_split": 1.5}, {"a": 5, "b": 5}, "validation_split: a share of the train file's rows in (0, 1)"),
    ({"validation_split": 0.2, "validation": "all.csv"}, {"a": 5, "b": 5}, "validation_split: draws the validation "
                                                                           "rows from the train file"),
    ({"split_seed": 3, "validation": "all.csv"}, {"a": 5, "b": 5}, "split_seed: seeds validation_split"),
    ({"train": None, "hub": "glue", "validation_split": 0.1}, {"a": 5, "b": 5}, "validation_split: draws the "
                                                                                 "validation rows from a train file"),
])
def test_a_draw_that_cannot_be_made_is_refused(tmp_path, extra, counts, said):
    raw = {key: value for key, value in {**_file(tmp_path, counts), **extra}.items() if value is not None}
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        read_task(task_from_mapping(raw, tmp_path))


def _split_file(tmp_path, parts: list[str]) -> dict:
    rows = [f"example {i},{'ab'[i % 2]},{part}" for i, part in enumerate(parts)]
    (tmp_path / "all.csv").write_text("text,label,split\n" + "\n".join(rows) + "\n")
    return {"name": "authors", "train": "all.csv", "split_field": "split"}


def test_a_split_column_reads_the_authors_split_and_leaves_the_test_rows_out(tmp_path):
    # Before it, the one way to read such a file was validation_split, which drew the authors' test rows into training.
    parts = ["train"] * 12 + ["dev"] * 4 + ["test"] * 6
    task, splits = read_task(task_from_mapping(_split_file(tmp_path, parts), tmp_path))
    assert (len(splits["train"]), len(splits["validation"])) == (12, 4)
    assert splits["train"]["text"] == [f"example {i}" for i in range(12)]
    assert splits["validation"]["text"] == [f"example {i}" for i in range(12, 16)]
    assert splits["train"].column_names == ["text", "label"]  # the split column is never an input
    assert task.left_out == (("test", 6),) and "rows of other splits left out: test 6" in task.describe()
    again = read_task(task_from_mapping(definition_mapping(task), None))[1]  # a trial elsewhere: the same rows
    assert again["validation"]["text"] == splits["validation"]["text"]


def test_a_split_columns_values_are_named_or_refused_saying_which_it_holds(tmp_path):
    raw = {**_split_file(tmp_path, ["TRAIN"] * 4 + ["held"] * 2), "split_values": {"train": "TRAIN",
                                                                                  "validation": ["held"]}}
    task, splits = read_task(task_from_mapping(raw, tmp_path))
    assert (len(splits["train"]), len(splits["validation"]), task.left_out) == (4, 2, ())
    with pytest.raises(IstarTuneError, match=r"no row's 'split' is validation or dev or val \(the validation split; "
                                             r"its values: 'TRAIN' \(4\), 'held' \(2\)\)"):
        read_task(task_from_mapping(_split_file(tmp_path, ["TRAIN"] * 4 + ["held"] * 2) | {
            "split_values": {"train": "TRAIN", "validation": ["validation", "dev", "val"]}}, tmp_path))
    with pytest.raises(ConfigError, match="split_field: draws the validation rows from the train file"):
        task_from_mapping({**_split_file(tmp_path, ["train"]), "validation": "all.csv"}, tmp_path)
    with pytest.raises(ConfigError, match="a value means one split"):
        task_from_mapping({**raw, "split_values": {"train": ["a", "b"], "validation": "b"}}, tmp_path)


def test_padded_answers_of_one_file_drawn_into_two_splits_are_counted_once(tmp_path):
    import json

    context = "alpha beta gamma delta"
    rows = [{"id": f"q{i}", "question": "which?", "context": context,
             "answers": {"text": [" beta" if i < 3 else "beta"], "answer_start": [5 if i < 3 else 6]}}
            for i in range(10)]
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task, splits = read_task(task_from_mapping({"name": "qa", "train": "all.jsonl", "validation_split": 0.2,
                                                "problem_type": "extractive_qa"}, tmp_path))
    assert task.answers_stripped == 3  # the file's three, not once for each split the file stands for
    assert {a["answer_start"][0] for s in ("train", "validation") for a in splits[s]["answers"]} == {6}
