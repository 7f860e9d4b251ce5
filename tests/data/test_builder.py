"""A builder's failure in one line: the innermost cause with its way out, a header without rows an empty table."""

from __future__ import annotations

import pytest

from istar_tune.data.builder import build, cause
from istar_tune.errors import DataError
from istar_tune.tasks import Task

TASK = Task("t", "T", "classification", "accuracy", format="csv")


def test_the_innermost_cause_is_said_with_its_way_out(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("text,label\ncaf\u00e9,1\n".encode("latin-1"))
    try:
        try:
            b"caf\xe9".decode("utf-8")
        except UnicodeDecodeError as inner:
            raise RuntimeError("An error occurred while generating the dataset") from inner
    except RuntimeError as wrapped:
        said = cause(wrapped, TASK, path)
    assert said.startswith("line 2: byte 0xe9 cannot be decoded as utf-8 (the file is not utf-8: give its encoding")
    fields = cause(ValueError("Error tokenizing data. C error: Expected 2 fields in line 3, saw 3"), TASK, path)
    assert fields.endswith("(a row with more separators than the header: quote it, or is the file tab-separated? "
                           "format: tsv)")


def test_a_header_without_rows_is_an_empty_table_and_a_broken_file_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label\n")
    assert len(build(TASK, "csv", path, {"sep": ","})) == 0
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"b.parquet: not a readable csv file: \w+"):
        build(TASK, "parquet", broken, {})
