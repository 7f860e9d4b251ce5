"""The GLUE layout's TSV (``format: glue``), parsed by hand where ``datasets`` cannot read it as it is: stray ``"``
(quoting off), MRPC's byte-order mark, CoLA without a header; each row must have the layout's column count, and a
malformed row is reported with its file and line. Rows come out as the task's fields and ``label`` as written."""

from __future__ import annotations

from pathlib import Path

from istar_tune.data.format import Format
from istar_tune.data.text_files import read_text
from istar_tune.errors import DataError
from istar_tune.tasks.task import Task


def parse_tsv(task: Task, path: Path) -> dict[str, list]:
    """Read one GLUE TSV into columns ``task.text_fields + ('label',)``."""
    lines = read_text(path, "utf-8-sig").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    layout = task.glue
    start = 1 if layout.header else 0
    if layout.header:
        if not lines:
            raise DataError(f"{path}: the file is empty; expected a header row")
        header = lines[0].rstrip("\r").split("\t")
        missing = [c for c in layout.columns.values() if isinstance(c, str) and c not in header]
        if missing:
            raise DataError(f"{path}: header lacks column(s) {', '.join(missing)}; found {', '.join(header)}")
        index = {name: header.index(col) for name, col in layout.columns.items()}
    else:
        index = dict(layout.columns)
    columns: dict[str, list] = {name: [] for name in (*task.text_fields, "label")}
    for number, line in enumerate(lines[start:], start=start + 1):
        fields = line.rstrip("\r").split("\t")
        where = f"{path}:{number}"
        if len(fields) != layout.num_columns:
            raise DataError(f"{where}: expected {layout.num_columns} tab-separated columns, found {len(fields)}")
        for name in task.text_fields:
            columns[name].append(fields[index[name]])
        columns["label"].append(fields[index["label"]])
    if not columns["label"]:
        raise DataError(f"{path}: no data rows")
    return columns


GLUE = Format(name="glue", read=parse_tsv, keys=frozenset({"glue"}),
              describes="a GLUE TSV as the GLUE layout ships it (quoting off), laid out by the glue key")
