"""One label rule for every format: canonical numbers, placeholders, lists, case variants, 1-based labels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from istar_tune.errors import DataError
from istar_tune.tasks import Task
from istar_tune.tasks.labels import (
    column_problems,
    distinct_labels,
    how_they_differ,
    label_value,
    one_based,
    read_column,
    spelling_variants,
)

CLASSES = Task(name="t", display_name="T", problem_type="classification", metric="accuracy",
               label_names=("negative", "positive"), indexed_labels=True)
STARS = Task(name="s", display_name="S", problem_type="classification", metric="accuracy",
             label_names=("1", "2", "3"), indexed_labels=True)
NEWS = Task(name="n", display_name="N", problem_type="classification", metric="accuracy",
            label_names=("World", "Sports"), label_values=("1", "2"))
SCORES = Task(name="r", display_name="R", problem_type="regression", metric="pearson")


def _rows(indices):
    return ", ".join(str(i + 1) for i in indices)


def test_a_class_by_its_name_or_its_index_where_the_definition_listed_the_names():
    assert label_value(CLASSES, "positive", "f:2") == 1 and label_value(CLASSES, 0, "f:2") == 0
    assert label_value(CLASSES, "1", "f:2") == 1 and label_value(CLASSES, 1.0, "f:2") == 1
    assert label_value(STARS, 1, "f:2") == 0  # a name first: star "1" is the first class, not index 1
    with pytest.raises(DataError, match="f:9: label 'neutral' is not one of negative, positive"):
        label_value(CLASSES, "neutral", "f:9")
    with pytest.raises(DataError, match="label '2' is not one of"):
        label_value(CLASSES, 2, "f:9")
    # Names read from the data never index: 0 is no class of negative/positive then.
    with pytest.raises(DataError, match="label '0' is not one of negative, positive$"):
        label_value(replace(CLASSES, indexed_labels=False), "0", "f:9")


def test_a_mapping_names_each_label_value_and_nothing_else():
    assert label_value(NEWS, "1", "f") == 0 and label_value(NEWS, "2.0", "f") == 1 and label_value(NEWS, 2, "f") == 1
    with pytest.raises(DataError, match="label '0' is not one of 1, 2"):
        label_value(NEWS, "0", "f")


def test_a_score_is_a_finite_number():
    assert label_value(SCORES, "3.8", "f:2") == 3.8 and label_value(SCORES, 4, "f:2") == 4.0
    with pytest.raises(DataError, match="score 'high' is not a number"):
        label_value(SCORES, "high", "f:3")
    with pytest.raises(DataError, match="not a finite number"):
        label_value(SCORES, "nan", "f:3")


def test_number_like_labels_are_one_number_where_the_column_is_numbers():
    column = read_column(["01", "1", "1.0", "1e0", 1, " 0 ", 0.0])
    assert column.numeric and column.texts == ["1", "1", "1", "1", "1", "0", "0"]
    assert distinct_labels(column.texts, column.numeric) == ("0", "1")
    words = read_column(["01", "pos"])  # not all numbers: each is its text
    assert not words.numeric and words.texts == ["01", "pos"]
    assert distinct_labels(read_column([10, 2, 1, 2.0]).texts, True) == ("1", "2", "10")
    assert not read_column([True, False]).numeric


def test_placeholders_and_lists_are_not_labels_unless_dropped():
    column = read_column(["0", "nan", None, "-", "1", [0, 1], float("nan"), "?"])
    assert column.texts == ["0", None, None, None, "1", None, None, None] and column.numeric
    assert column.structured == [5]
    problems = column_problems(column, "f", _rows)
    assert problems[0] == ("f: rows 6: the label is a list or a mapping: multi-label classification is not "
                           "supported (one label per row)")
    assert problems[1].startswith("f: rows 2, 3, 4, 7, 8: 'nan', '', '-', '?' are not a label")
    assert "drop_labels" in problems[1]
    dropped = read_column(["a", "-", "b"], drop=["-"])
    assert dropped.texts == ["a", None, "b"] and not dropped.missing


def test_case_variants_and_one_based_labels():
    assert spelling_variants(["Positive", "positive", "neg"]) == [("Positive", "positive")]
    assert spelling_variants(["Positive", "positive"], declared=["Positive", "positive"]) == []
    assert one_based(["1", "2", "4", "3"], True, ["World", "Sports", "Business", "Sci/Tech"])
    assert not one_based(["0", "1", "2", "3"], True, ["World", "Sports", "Business", "Sci/Tech"])
    assert not one_based(["1", "2"], True, ["1", "2"])  # names that are numbers are names


@pytest.mark.parametrize(("spellings", "differ"), [
    (["positive", "positive\u200b"], "'positive\\u200b' holds U+200B ZERO WIDTH SPACE"),
    (["caf\u00e9", "cafe\u0301"], "holds U+0301 COMBINING ACUTE ACCENT; 'caf\u00e9' holds U+00E9 LATIN SMALL LETTER"),
    (["positive", '"positive"'], "'\"positive\"' holds printable ASCII only"),
    (["\ufeffneg", "neg"], "'\\ufeffneg' holds U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    (["Positive", "positive"], "differ only in case"),
    (["\ufb01ne", "fine"], "'\ufb01ne' holds U+FB01 LATIN SMALL LIGATURE FI"),  # casefold maps it: not a case
])
def test_spellings_of_one_name_are_refused_naming_the_code_points_that_differ(spellings, differ):
    # The rule's one normal form, as docs/tasks.md states it: NFKC, format characters (Cf) removed, surrounding quotes
    # and whitespace stripped, case folded. Two spellings that meet there are not two classes, silently.
    [found] = spelling_variants([*spellings, "other"])
    assert set(found) == set(spellings) and differ in how_they_differ(found)
    assert spelling_variants(spellings, declared=spellings) == []  # declared: each its own class
    assert spelling_variants(["positive", "negative", "positive "]) == [("positive", "positive ")]


def _rule_examples() -> dict[str, list[str]]:
    """The examples docs/reference.md's "What a class is" gives on each side of the line, read from its words."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("## What a class is", 1)[1]
    code = section.split("- **an integer code**", 1)[1].split("- **a name**", 1)[0]
    name = section.split("- **a name**", 1)[1].split("Any other label", 1)[0]
    quantity = section.split("Any other label reads as a quantity", 1)[1].split("Such a column", 1)[0]
    return {side: re.findall(r"`([^`]+)`", words) for side, words in
            (("code", code), ("name", name), ("quantity", quantity))}


@pytest.mark.parametrize(("side", "label"), [(side, label) for side, labels in _rule_examples().items()
                                             for label in labels])
def test_each_example_of_the_documented_class_rule_reads_as_the_docs_say(side, label, tmp_path):
    """The reference is the docs' own words: an integer code or a name trains as a class; every quantity is refused
    in one line with both fixes (regression, or label_names), and declared it is a class."""
    import json

    from istar_tune.data.reading import read_task
    from istar_tune.errors import ConfigError
    from istar_tune.tasks import task_from_mapping

    other = "5" if side == "code" else "other"  # a code beside a code; a name or a quantity beside a word
    rows = [{"text": f"row {i}", "label": value} for i, value in enumerate([label, other, label, other])]
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    definition = {"name": "rule", "train": "train.jsonl", "validation": "dev.jsonl", "problem_type": "classification"}
    if side == "quantity":
        with pytest.raises(ConfigError) as err:
            read_task(task_from_mapping(definition, tmp_path))
        (line,) = err.value.problems
        assert repr(label) in line and "problem_type: regression" in line and "label_names: [...]" in line, line
        declared = read_task(task_from_mapping({**definition, "label_names": [label, other]}, tmp_path))[0]
        assert declared.label_names == (label, other)
        return
    task = read_task(task_from_mapping(definition, tmp_path))[0]
    assert len(task.label_names) == 2
    if side == "name":
        assert label in task.label_names
