"""How a definition lays out its data: files and their format, a delimited file's separator, the encoding, a hub data
set, a GLUE TSV's layout."""

from __future__ import annotations

import pytest

from istar_tune.errors import ConfigError
from istar_tune.tasks import definition_mapping, task_from_mapping
from istar_tune.tasks.layout import separator_of


def _files(folder, suffix):
    for split in ("train", "dev"):
        (folder / f"{split}{suffix}").write_text("text;label\nhi;a\n")


@pytest.mark.parametrize("suffix", [".txt", ".psv", ".csv", ""])
def test_a_separator_makes_any_delimited_file_a_csv_and_travels_with_the_definition(tmp_path, suffix):
    _files(tmp_path, suffix)
    task = task_from_mapping({"name": "t", "train": f"train{suffix}", "validation": f"dev{suffix}", "separator": ";",
                              "problem_type": "classification"}, tmp_path, source="x")
    assert (task.format, task.separator) == ("csv", ";")
    assert task_from_mapping(definition_mapping(task), base_dir="/elsewhere", source="x") == task


def test_a_text_file_without_a_separator_names_the_key_that_reads_it(tmp_path):
    _files(tmp_path, ".txt")
    with pytest.raises(ConfigError, match="cannot tell the format from train.txt, dev.txt: give format: one of csv, "
                                          ".*\\(a delimited text file: separator: ';'\\)"):
        task_from_mapping({"name": "t", "train": "train.txt", "validation": "dev.txt"}, tmp_path)


@pytest.mark.parametrize(("value", "file_format"), [(";;", "csv"), ('"', "csv"), ("\n", "csv"), (3, "csv"),
                                                    (";", "tsv"), (";", "json"), (";", "")])
def test_a_separator_is_one_character_of_a_csv_style_file(value, file_format):
    said = []
    assert separator_of(value, file_format, lambda key, text: said.append((key, text))) == ""
    [(key, text)] = said
    assert key == "separator" and text.startswith("one character that is not a quote or a line break")
    assert repr(value) in text
    assert separator_of("|", "csv", lambda *_: pytest.fail("refused")) == "|"
    assert separator_of("", "json", lambda *_: pytest.fail("refused")) == ""


def _parts(folder, names):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("text,label\nhi,a\n", encoding="utf-8")


def test_a_pattern_is_its_matches_in_name_order_and_travels_as_the_list(tmp_path):
    _parts(tmp_path / "data", ["train-10.csv", "train-02.csv", "train-01.csv", "dev.csv", "other.csv"])
    task = task_from_mapping({"name": "t", "train": "data/train-*.csv", "validation": "data/dev.csv",
                              "problem_type": "classification"}, tmp_path, source="x")
    folder = (tmp_path / "data").resolve()
    assert task.files["train"] == [str(folder / n) for n in ("train-01.csv", "train-02.csv", "train-10.csv")]
    assert task.files["validation"] == str(folder / "dev.csv") and task.format == "csv"
    # A trial elsewhere reads the files the search was planned on: the matches, not the pattern again.
    assert task_from_mapping(definition_mapping(task), base_dir="/elsewhere", source="x") == task
    assert "train-01.csv + " in task.split_source("train")


def test_a_list_keeps_its_order_and_a_pattern_of_one_file_is_that_file(tmp_path):
    _parts(tmp_path, ["b.csv", "a.csv", "dev.csv"])
    task = task_from_mapping({"name": "t", "train": ["b.csv", "a.csv"], "validation": "dev*.csv",
                              "problem_type": "classification"}, tmp_path, source="x")
    assert [p.rsplit("/", 1)[1] for p in task.files["train"]] == ["b.csv", "a.csv"]
    assert task.files["validation"] == str((tmp_path / "dev.csv").resolve())


@pytest.mark.parametrize(("train", "said"), [
    ("data/nothing-*.csv", "train: no file matches 'data/nothing-\\*.csv'"),
    (["a.csv", "missing.csv"], "train: file '.*missing.csv' does not exist"),
    (["a.csv", "a.csv"], "train: names '.*a.csv' more than once"),
    ([], "train: a list of the train split's files"),
    (["a.csv", 3], "train: a list of the train split's files .*got \\['a.csv', 3\\]"),
])
def test_parts_that_cannot_be_read_are_refused_naming_the_key(tmp_path, train, said):
    _parts(tmp_path, ["a.csv", "dev.csv"])
    with pytest.raises(ConfigError, match=said):
        task_from_mapping({"name": "t", "train": train, "validation": "dev.csv", "problem_type": "classification"},
                          tmp_path, source="x")


def test_parts_of_parallel_files_are_refused(tmp_path):
    _parts(tmp_path, ["a.txt", "b.txt", "a.labels", "dev.txt", "dev.labels"])
    with pytest.raises(ConfigError, match="parallel files .* take one file a field"):
        task_from_mapping({"name": "t", "train": ["a.txt", "b.txt"], "validation": {"text": "dev.txt",
                           "label": "dev.labels"}, "problem_type": "classification"}, tmp_path, source="x")
