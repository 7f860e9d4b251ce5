"""Delimited text (``format: csv`` with RFC 4180 quoting and any one-character ``separator``, ``.txt`` included;
``format: tsv``, tab-separated and read unquoted), each file parsed once by one parser into columns of the text
written: a cell is never a number, a null or a date until the label rule reads it (pandas turned ``NA`` into a null and
a column of digits into integers). Both splits' first lines are checked before any is read (a binary file under a
text name, a header with a column twice or one that looks like data); a row whose field count differs from its names
is refused, naming its rows (pandas made the first of one more field an index and shifted every column)."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

from istar_tune.data.format import Format
from istar_tune.data.rows import rows_text
from istar_tune.data.text_files import refuse_binary, undecodable
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks.labels import is_number
from istar_tune.tasks.task import Task
from istar_tune.tasks.values import excerpt

HEADER_WORDS = 5
"""A header cell of this many words or more reads as a sentence: the first row is data, not a header."""


def read_delimited(task: Task, path: Path) -> dict[str, list]:
    """One csv/tsv split's columns, every cell the text written (the file parsed once: its header, every row's field
    count against its names, then its columns)."""
    task = _excel_separator(task, path)
    records = _records(task, path)
    if not records:
        return {}
    names = list(task.column_names) or records[0]
    body = records[0 if task.column_names else 1:]
    _field_counts(task, path, body, len(names))
    if task.format != TSV.name and any("\t" in name for name in names):
        tab = next(name for name in names if "\t" in name)
        raise DataError(f"{path}: its header {tab!r} holds tabs, not commas: a tab-separated file named .csv? give "
                        "format: tsv (or name it .tsv)")
    return {name: [row[i] for row in body] for i, name in enumerate(names)}


def check_delimited(task: Task, files: dict[str, Path]) -> None:
    """Both splits' files before any is read: text, and their headers (the first line alone)."""
    for path in dict.fromkeys(files.values()):
        refuse_binary(path, task.format, task.encoding)
    _check_headers(task, files, {split: header(_excel_separator(task, path), path) for split, path in files.items()})


def header(task: Task, path: Path) -> list[str]:
    """The first row of a csv/tsv file as its cells (the header unless ``column_names`` is given)."""
    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            first = handle.readline().lstrip("\ufeff")
            if task.excel_separator_line:
                first = handle.readline()
    except (UnicodeDecodeError, LookupError):
        return []  # said when the file is read, with the line and byte
    if task.format == TSV.name:
        return [cell.strip() for cell in first.rstrip("\r\n").split("\t")] if first else []
    try:
        return [cell.strip() for cell in next(_csv_rows([first], task), [])]
    except csv.Error:
        return []  # said when the file is read, with its line


def _records(task: Task, path: Path) -> list[list[str]]:
    """Every non-blank row of the file, parsed once: csv by Python's csv module (RFC 4180 quoting, strictly: text after
    a closing quote, or a quote never closed, is refused, not joined), tsv split at tabs with quoting off; a file that
    does not decode or parse is one line."""
    reader = None
    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            lines = _without_bom(handle)
            if task.excel_separator_line:
                next(lines, None)
            if task.format == TSV.name:
                return [line.rstrip("\r\n").split("\t") for line in lines if line.strip("\r\n")]
            reader = _csv_rows(lines, task)
            return [row for row in reader if row]
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a readable {task.format} file: {undecodable(path, task.encoding)}") from None
    except csv.Error as err:
        where = f"line {reader.line_num}: " if reader is not None else ""
        other = _other_separator(task, path)
        fix = (f"its header holds {other!r} and no {task.separator or ','!r}: a {other!r}-separated file? give "
               f"separator: {other!r} in the task's definition" if other else "a quote inside a quoted cell, or one "
               "never closed? quote a cell whole, doubling each quote inside it (\"say \"\"hi\"\"\"), or give "
               "format: tsv")
        raise DataError(f"{path}: not a readable {task.format} file: {where}{err}: {fix}") from None


EXCEL_SEPARATOR = re.compile(r"sep=(.)\r?\n?")
"""Excel's first line naming a csv file's separator (``sep=;``): read, not taken for a header."""


def _excel_separator(task: Task, path: Path) -> Task:
    """The task with the separator a first line ``sep=X`` names (Excel writes one for a locale's ``;``); a definition
    that gives another separator is refused (which one is right?)."""
    if task.format == TSV.name:
        return task
    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            found = EXCEL_SEPARATOR.fullmatch(handle.readline().lstrip("\ufeff"))
    except (UnicodeDecodeError, LookupError):
        return task  # said when the file is read
    if found is None:
        return task
    if task.separator and task.separator != found.group(1):
        raise DataError(f"{path}: its first line {found.group().strip()!r} names the separator {found.group(1)!r}, but "
                        f"the definition gives separator: {task.separator!r}: leave separator out, or fix the file")
    return replace(task, separator=found.group(1), excel_separator_line=True)


def _other_separator(task: Task, path: Path) -> str:
    """A separator the file's header holds where the task's own is absent from it ("" if none)."""
    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            first = handle.readline()
    except (UnicodeDecodeError, LookupError):
        return ""
    own = task.separator or ","
    return "" if own in first else next((c for c in ";|\t^~@#:" if c in first), "")


def _lone_carriage_return(path: Path) -> int:
    """The line (counting ``\\n``) of the first carriage return not followed by ``\\n``, or 0."""
    raw = Path(path).read_bytes()
    found = re.search(rb"\r(?!\n)", raw)
    return raw[:found.start()].count(b"\n") + 1 if found else 0


def _without_bom(handle):
    """A file's lines with the byte-order mark an Excel "CSV UTF-8" export begins with removed before parsing: before
    a quote (``\ufeff"text",label``) it would make the quote literal, so the cell would keep its quotes."""
    first = next(handle, "")
    yield first.removeprefix("\ufeff")
    yield from handle


def _csv_rows(lines, task: Task):
    """A csv file's rows with the task's separator; a cell as long as any the checker lets through is read (Python's
    csv module stops at 128 KiB by default)."""
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    return csv.reader(lines, delimiter=task.separator or ",", strict=True)


def _field_counts(task: Task, path: Path, rows: list[list[str]], expected: int) -> None:
    """Every row has as many fields as its names (a row of one more or one fewer would shift or drop a column): the
    rows that do not are refused in one line."""
    bad = [index for index, row in enumerate(rows) if len(row) != expected]
    if bad and (line := _lone_carriage_return(path)):
        raise DataError(f"{path}: line {line}: a carriage return (\\r) alone inside a cell ends the row there (it is a "
                        "line break): quote that cell, or remove the \\r")
    if bad:
        tab = task.format == TSV.name
        sep = task.separator or ","
        fix = ("a tab inside a cell? a tsv file is read unquoted, so a cell cannot hold a tab: remove it" if
               tab else f"a {sep!r} inside a cell that is not quoted? quote that cell (\"a{sep} b\")")
        counts = sorted({len(rows[i]) for i in bad})
        found = " or ".join(map(str, counts)) + (" field" if counts == [1] else " fields")
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
    cells = next((cells for cells in looks.values() if cells), [])
    if cells:
        problems.append(f"{files['train']}: the first row looks like data ({excerpt(cells[0])} as a column name): give "
                        "the columns with column_names: [...] in the task's definition (--column-names A,B on the "
                        "command line)")
    elif differ:  # two headers, neither of them data-like: which one is right is the user's to say
        problems.append(f"{files['train']} and {files['validation']} name their columns differently "
                        f"({', '.join(headers['train'])} against {', '.join(headers['validation'])}): name them the "
                        "same in both files, or, if each file's first row is data, give the columns with "
                        "column_names: [...] (--column-names A,B)")
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))


TEXT_KEYS = frozenset({"encoding", "column_names"})
CSV = Format(name="csv", read=read_delimited, check=check_delimited, extensions=(".csv",),
             keys=TEXT_KEYS | {"separator"},
             describes="comma-separated values with quoted cells (another one-character separator: separator)")
TSV = Format(name="tsv", read=read_delimited, check=check_delimited, extensions=(".tsv",), keys=TEXT_KEYS,
             describes="tab-separated values, read unquoted (every cell as written; a cell cannot hold a tab)")
