"""A builder's failure in one line: the innermost cause; a header without rows an empty table."""

from __future__ import annotations

import pytest

from istar_tune.data.builder import build, cause
from istar_tune.errors import DataError
from istar_tune.tasks import Task

TASK = Task("t", "T", "classification", "accuracy", format="csv")


def test_the_innermost_cause_is_said_on_one_line():
    try:
        try:
            raise ValueError("Parquet magic bytes not found\n in footer")
        except ValueError as inner:
            raise RuntimeError("An error occurred while generating the dataset") from inner
    except RuntimeError as wrapped:
        assert cause(wrapped) == "ValueError: Parquet magic bytes not found in footer"


def test_a_header_without_rows_is_an_empty_table_and_a_broken_file_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label\n")
    assert len(build(TASK, "csv", path, {"sep": ","})) == 0
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"b.parquet: not a readable csv file: \w+"):
        build(TASK, "parquet", broken, {})
