"""How a refusal names rows and kinds of values."""

from __future__ import annotations

from istar_tune.data.rows import rows_text, value_kind


def test_rows_and_kinds_as_a_refusal_names_them():
    assert rows_text([0, 1, 2, 3, 4, 5, 6]) == "1, 2, 3, 4, 5 and 2 more"
    assert rows_text([]) == ""
    assert [value_kind(v) for v in (1, 2.5, True, [1], {"a": 1}, "x", None)] == [
        "numbers", "numbers", "yes/no values", "lists", "mappings (nested objects)", "text", "NoneType"]
