"""Delimited text (``format: csv`` with quoted cells and any one-character ``separator``, ``.txt`` included;
``format: tsv``, tab-separated and read unquoted, every cell as written), read with ``datasets``' csv builder. Before
any row is read, both splits' files are checked: a binary file under a text name, a header with a column twice or
one that looks like data, and a row whose field count differs from its names (pandas would shift every column)."""

from __future__ import annotations

import csv
from pathlib import Path

from istar_tune.data.builder import build
from istar_tune.data.format import Format
from istar_tune.data.rows import rows_text
from istar_tune.data.text_files import refuse_binary
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks.labels import is_number
from istar_tune.tasks.task import SPLITS, Task

HEADER_WORDS = 5
"""A header cell of this many words or more reads as a sentence: the first row is data, not a header."""
VERBATIM = {"keep_default_na": False}
"""A cell is what is written: 'nan', 'NA' and '' are not turned into nulls the label rule could not name."""


def read_delimited(task: Task, path: Path):
    """One csv/tsv split as a table (the checks of :func:`check_delimited` first)."""
    tab = task.format == TSV.name
    options = {"sep": "\t", "quoting": csv.QUOTE_NONE} if tab else {"sep": task.separator or ","}
    options.update(VERBATIM, encoding=task.encoding)
    if task.column_names:
        options["column_names"] = list(task.column_names)
    data = build(task, "csv", path, options)
    tabs = [c for c in data.column_names if "\t" in c]
    if not tab and tabs:
        raise DataError(f"{path}: its header {tabs[0]!r} holds tabs, not commas: a tab-separated file named .csv? "
                        "give format: tsv (or name it .tsv)")
    return data


def check_delimited(task: Task, files: dict[str, Path]) -> None:
    """Both splits' files before any is read: text, their headers, every row's field count."""
    for split in SPLITS:
        refuse_binary(files[split], task.format)
    headers = {split: header(task, files[split]) for split in SPLITS}
    _check_headers(task, files, headers)
    for split, names in headers.items():
        _field_counts(task, files[split], len(task.column_names or names))


def header(task: Task, path: Path) -> list[str]:
    """The first row of a csv/tsv file as its cells (the header unless ``column_names`` is given)."""
    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            first = handle.readline().lstrip("\ufeff")
    except (UnicodeDecodeError, LookupError):
        return []  # said in the builder's own error, with the line and byte
    if task.format == TSV.name:
        return [cell.strip() for cell in first.rstrip("\r\n").split("\t")] if first else []
    return [cell.strip() for cell in next(_csv_rows([first], task), [])]


def _csv_rows(lines, task: Task):
    """A csv file's rows with the task's separator; a cell as long as any the checker lets through is read (Python's
    csv module stops at 128 KiB by default, where pandas reads on)."""
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    return csv.reader(lines, delimiter=task.separator or ",")


def _field_counts(task: Task, path: Path, expected: int) -> None:
    """Every row of a csv/tsv file has as many fields as its names (pandas would make the first of one more field a
    row index and shift every column, or fill one fewer with nulls): the rows that do not are refused in one line."""
    if not expected:
        return
    bad, counts = [], set()
    tab = task.format == TSV.name
    with open(path, encoding=task.encoding, newline="") as handle:
        records = (line.rstrip("\r\n").split("\t") if line.strip("\r\n") else [] for line in handle) if (
            tab) else _csv_rows(handle, task)
        try:
            rows = [r for r in records if r]
        except (UnicodeDecodeError, csv.Error):
            return  # said by the builder, with its line
    for index, row in enumerate(rows[0 if task.column_names else 1:]):
        if len(row) != expected:
            bad.append(index)
            counts.add(len(row))
    if bad:
        sep = task.separator or ","
        fix = ("a tab inside a cell? a tsv file is read unquoted, so a cell cannot hold a tab: remove it" if
               tab else f"a {sep!r} inside a cell that is not quoted? quote that cell (\"a{sep} b\")")
        found = " or ".join(map(str, sorted(counts))) + (" field" if counts == {1} else " fields")
        raise DataError(f"{path}: rows {rows_text(bad)}: {found} where the "
                        f"{'column_names give' if task.column_names else 'header has'} {expected}: {fix}, or a "
                        "field missing")


def _check_headers(task: Task, files: dict[str, Path], headers: dict[str, list[str]]) -> None:
    """A header with a column name twice is refused (which one is the label?); a first row that looks like data (a
    number or a sentence as a column name, or train and validation headers that differ) asks for ``column_names``."""
    if task.column_names:
        return
    problems = []
    for split, names in headers.items():
        twice = sorted({c for c in names if names.count(c) > 1})
        if twice:
            problems.append(f"{files[split]}: the header names {', '.join(map(repr, twice))} more than once: name each "
                            "column once")
    looks = {split: [c for c in names if is_number(c) or len(c.split()) >= HEADER_WORDS]
             for split, names in headers.items()}
    differ = len(headers) == 2 and all(headers.values()) and set(headers["train"]) != set(headers["validation"])
    if any(looks.values()) or differ:
        cells = next((cells for cells in looks.values() if cells), [])
        why = (f"{cells[0]!r} as a column name" if cells else
               f"train's header {', '.join(headers['train'])} against validation's {', '.join(headers['validation'])}")
        problems.append(f"{files['train']}: the first row looks like data ({why}): give the columns with "
                        "column_names: [...] in the task's definition (--column-names A,B on the command line)")
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))


TEXT_KEYS = frozenset({"encoding", "column_names"})
CSV = Format(name="csv", read=read_delimited, check=check_delimited, extensions=(".csv",),
             keys=TEXT_KEYS | {"separator"},
             describes="comma-separated values with quoted cells (another one-character separator: separator)")
TSV = Format(name="tsv", read=read_delimited, check=check_delimited, extensions=(".tsv",), keys=TEXT_KEYS,
             describes="tab-separated values, read unquoted (every cell as written; a cell cannot hold a tab)")
