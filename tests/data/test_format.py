"""A format's columns become a table; a column mixing kinds is refused in one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.data.format import table
from istar_tune.errors import DataError


def test_columns_become_a_table_and_a_mixture_is_refused():
    assert table({"text": ["a", "b"], "label": ["1", "0"]}, Path("t.csv"))["label"] == ["1", "0"]
    with pytest.raises(DataError, match=r"^t.json: a field holds values of different kinds \(text, numbers, null, "
                                        r"lists\): .*; write each field one way$"):
        table({"text": ["a", ["b", "c"]]}, Path("t.json"))
