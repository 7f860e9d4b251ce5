"""Parallel files (``format: lines``): a split is a mapping of field to file, one row a line in every file (a
translation corpus' ``train.en``/``train.labels``, fairseq's ``input0``/``label``). Lines are split at ``\\n`` only
(a ``\\r`` before it is dropped, U+2028 and U+0085 are text), a final line break ends the last row, and files whose
line counts differ are refused, naming each count: a row is never paired with another row's label."""

from __future__ import annotations

from pathlib import Path

from istar_tune.data.format import Format
from istar_tune.data.text_files import read_text, refuse_binary
from istar_tune.errors import DataError
from istar_tune.tasks.task import SPLITS, Task


def read_lines(task: Task, parts: dict[str, Path]) -> dict[str, list]:
    """One split's fields, each a file's lines."""
    columns = {field: _lines(task, path) for field, path in parts.items()}
    counts = {field: len(values) for field, values in columns.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{parts[field].name} ({field}) {count:,}" for field, count in counts.items())
        raise DataError(f"{', '.join(str(p) for p in parts.values())}: parallel files with different line counts "
                        f"({shown}): each file holds one line a row, in the same order")
    return columns


def _lines(task: Task, path: Path) -> list[str]:
    text = read_text(path, task.encoding).removeprefix("\ufeff")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final line break ends the last row
    return [line.removesuffix("\r") for line in lines]


def check_lines(task: Task, files: dict[str, dict[str, Path]]) -> None:
    """Every part of both splits is text."""
    for split in SPLITS:
        for path in files[split].values():
            refuse_binary(path, "lines", task.encoding)


LINES = Format(name="lines", read=read_lines, check=check_lines, parts=True, keys=frozenset({"encoding"}),
               describes="parallel text files, one row a line, a split given as {field: file}")
