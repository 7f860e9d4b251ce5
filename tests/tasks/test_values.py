"""A label value's text and canonical number, as the label rule states them (docs/tasks.md): one spelling per value,
integers exact."""

from __future__ import annotations

import pytest

from istar_tune.tasks.values import canonical_number, label_text


@pytest.mark.parametrize(("value", "canonical"), [
    ("01", "1"), ("1", "1"), ("1.0", "1"), ("1e0", "1"), (1, "1"), (1.0, "1"), (" 2 ", "2"), ("0.5", "0.5"),
    ("-3", "-3"), (str(2**53 + 1), "9007199254740993"), (2**64 + 1, "18446744073709551617"),
    ("nan", None), ("inf", None), ("pos", None), ("3,5", None), (True, None)])
def test_a_number_is_one_class_however_written_and_an_integer_stays_exact(value, canonical):
    assert canonical_number(value) == canonical


def test_a_label_is_its_text_stripped_and_a_whole_float_its_integer():
    assert [label_text(v) for v in (" pos ", 1.0, 2.5, 3, "x")] == ["pos", "1", "2.5", "3", "x"]
