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
