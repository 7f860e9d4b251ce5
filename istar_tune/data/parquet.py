"""Parquet files (``format: parquet``), read with ``datasets``' parquet builder; a file with no rows is an empty split
(the builder's own error would hide that)."""

from __future__ import annotations

from pathlib import Path

from istar_tune.data.builder import build
from istar_tune.data.format import Format
from istar_tune.tasks.task import Task


def read_parquet(task: Task, path: Path):
    """One parquet split as a table."""
    if _rows(path) == 0:
        return {}
    return build(task, "parquet", path, {})


def _rows(path: Path) -> int | None:
    """A parquet file's row count from its footer (``None``: not readable as parquet; the builder says why)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # noqa: BLE001 — said by the builder, in its words
        return None


PARQUET = Format(name="parquet", read=read_parquet, extensions=(".parquet",), describes="Apache Parquet tables")
