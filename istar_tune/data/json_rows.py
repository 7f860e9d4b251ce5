"""JSON and JSON Lines files parsed once, by one parser, into a table (``datasets``' json builder is not used: it
splits lines with ``str.splitlines()``, which also breaks at U+2028, U+2029 and U+0085 inside a string, and on a field
that mixes kinds it falls back to pandas, which coerces: labels ``"-"`` and ``0`` come out as 0 and 0).

The file is a list of objects (one a row), or JSON Lines (one object a line, lines split at ``\\n`` only). What could
be two things is refused in one line naming where and the fix: a mapping of columns (``{"text": [...], "label":
[...]}``), rows under a key (``{"data": [...]}``), a trailing comma, a line that is not an object. A field's values
are kept as written; the label field's mixture of scalars is kept as text (the label rule reads it), a label that is
a list or a mapping is refused, and any other field that mixes kinds is refused, naming its rows."""

from __future__ import annotations

import json
from pathlib import Path

from istar_tune.data.format import Format, table
from istar_tune.data.rows import rows_text, value_kind
from istar_tune.data.text_files import refuse_binary, undecodable
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks.task import EXTRACTIVE_QA, SPLITS, Task
from istar_tune.tasks.values import label_text

ROWS_HINT = "write one object a row: a list of objects, or JSON Lines (one object a line)"


def read_json(task: Task, path: Path):
    """A JSON or JSON Lines file's rows as a table (see the module's docstring for what is refused)."""
    rows = json_rows(path, task.encoding)
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {name: [r.get(name) for r in rows] for name in names}
    problems = []
    for name, values in columns.items():
        kinds = {value_kind(v) for v in values if v is not None}
        if len(kinds) <= 1:
            continue
        if name == task.label_field and task.problem_type != EXTRACTIVE_QA:
            structured = [i for i, v in enumerate(values) if isinstance(v, (list, dict))]
            if structured:
                problems.append(f"{path}: rows {rows_text(structured)}: the label is a list or a mapping: multi-label "
                                "classification is not supported (one label per row)")
            columns[name] = [v if v is None or isinstance(v, (list, dict)) else label_text(v) for v in values]
            continue
        by_kind: dict[str, list[int]] = {}
        for i, v in enumerate(values):
            if v is not None:
                by_kind.setdefault(value_kind(v), []).append(i)
        shown = "; ".join(f"{kind} in rows {rows_text(found)}" for kind, found in sorted(by_kind.items()))
        problems.append(f"{path}: field {name!r} holds values of different kinds ({shown}): write each field one way "
                        "(a text field holds text)")
    if problems:
        raise ConfigError(problems)
    return table(columns, path)


def json_rows(path: Path, encoding: str) -> list[dict]:
    """The file's rows, each an object; one :class:`DataError` naming what is not."""
    try:
        text = path.read_text(encoding=encoding).lstrip("\ufeff")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not a readable json file: {undecodable(path, encoding) or err}") from None
    start = text.lstrip()[:1]
    if start in ("[", "{"):
        try:
            whole = json.loads(text)
        except RecursionError:
            raise DataError(f"{path}: not a readable json file: nested too deeply to be rows") from None
        except ValueError as err:
            if start == "[":  # a list that does not parse: a JSON Lines reading would not help
                raise DataError(f"{path}: not a readable json file: {_parse_error(err, text)}") from None
        else:
            return _whole(whole, path)
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip(" \t\r")
        if not line:
            continue
        try:
            row = json.loads(line)
        except RecursionError:
            raise DataError(f"{path}: line {number}: nested too deeply to be a row") from None
        except ValueError as err:
            comma = " (a trailing comma: JSON Lines holds one object a line, nothing between them)" if (
                line.endswith(",")) else ""
            said = f"{err.msg} at column {err.colno}" if isinstance(err, json.JSONDecodeError) else str(err)
            raise DataError(f"{path}: line {number}: not a JSON object: {said}{comma}; "
                            f"{ROWS_HINT}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number} holds {_kind(row)}, not an object: {ROWS_HINT}")
        rows.append(row)
    return rows


def _whole(value, path: Path) -> list[dict]:
    """A file that parses as one JSON value: a list of objects, or one object (a JSON Lines file of one row)."""
    if isinstance(value, list):
        other = [i for i, row in enumerate(value) if not isinstance(row, dict)]
        if other:
            raise DataError(f"{path}: rows {rows_text(other)} of the list hold {_kind(value[other[0]])}, not objects: "
                            f"{ROWS_HINT}")
        return value
    lists = {k: v for k, v in value.items() if isinstance(v, list)}
    if lists and len(lists) == len(value) and len({len(v) for v in lists.values()}) == 1 and len(value) > 1:
        raise DataError(f"{path}: a mapping of columns ({', '.join(map(repr, list(value)[:4]))}, each a list), not "
                        f"rows: {ROWS_HINT}")
    maps = [v for v in value.values() if isinstance(v, dict)]
    if len(maps) == len(value) > 1 and len({tuple(v) for v in maps}) == 1 and maps[0]:
        raise DataError(f"{path}: pandas' to_json layout (orient='columns': {', '.join(map(repr, list(value)[:4]))}, "
                        "each a mapping of row index to value), not rows: write it with "
                        "to_json(path, orient='records', lines=True)")
    nested = [k for k, v in lists.items() if v and all(isinstance(r, dict) for r in v)]
    if nested:
        raise DataError(f"{path}: the rows sit under the key {nested[0]!r}: {ROWS_HINT} at the file's top level")
    return [value]


def _kind(value) -> str:
    return {list: "a list", dict: "an object", str: "text", bool: "a yes/no value", type(None): "null"}.get(
        type(value), "a number")


def _parse_error(err: ValueError, text: str) -> str:
    """A JSON parse error's position, and a trailing comma named where it is one."""
    if isinstance(err, json.JSONDecodeError):
        before = text[:err.pos].rstrip()
        comma = " (a trailing comma before the closing bracket)" if before.endswith(",") and text[
            err.pos:err.pos + 1] in "]}" else ""
        return f"line {err.lineno} column {err.colno}: {err.msg}{comma}"
    return str(err)


def _check(task: Task, files: dict[str, Path]) -> None:
    for split in SPLITS:
        refuse_binary(files[split], "json", task.encoding)


JSON = Format(name="json", read=read_json, check=_check, extensions=(".json", ".jsonl"),
              keys=frozenset({"encoding"}), describes="a list of objects or JSON Lines (one object a line)")
