"""How a task's data is laid out, as its definition says it: the split files (relative to the definition's folder, or
to the data folder) and their format (from the extension unless given; a delimited text file with a ``separator`` is
read as csv), a csv-style file's separator, the text encoding, a hub data set, the GLUE layout of a TSV. Each reports
what is wrong through the definition's ``problem(key, text)``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from istar_tune.tasks.data_folder import looks_like_squad
from istar_tune.tasks.task import DEFAULT_ENCODING, EXTENSIONS, FORMATS, IN_DATA_FOLDER, SPLITS, GlueLayout, HubSource

HUB_KEYS = ("path", "name", "train_split", "validation_split", "columns")
GLUE_KEYS = ("header", "num_columns", "columns")
SEPARATORS_REFUSED = "\"\r\n"
"""Characters a separator cannot be (they quote cells or end rows)."""


def separator_of(value, file_format: str, problem) -> str:
    """A csv-style file's one-character separator (``""``: the format's own)."""
    if value in ("", None):
        return ""
    if not isinstance(value, str) or len(value) != 1 or value in SEPARATORS_REFUSED or file_format != "csv":
        problem("separator", f"one character that is not a quote or a line break, for a delimited file (format csv; "
                             f"a tsv file is tab-separated), got {value!r} for format {file_format or 'none'}")
        return ""
    return value


def files_and_format(raw: Mapping[str, Any], base_dir, files_in: str, problem) -> tuple[dict[str, str], str]:
    """The split files (absolute; as given when they are in the data folder) and their format: as given, ``csv`` for
    a file with a ``separator``, else from the extensions (JSON holding SQuAD's nesting is ``squad``)."""
    given = {split: raw[split] for split in SPLITS if split in raw}
    file_format = raw.get("format")
    if file_format is not None and file_format not in FORMATS:
        problem("format", f"must be one of {', '.join(FORMATS)}, got {file_format!r}")
        file_format = None
    if not given:
        return {}, file_format or ""
    files: dict[str, str] = {}
    for split in SPLITS:
        value = given.get(split)
        if not isinstance(value, (str, Path)) or not str(value):
            problem(split, f"give the {split} file's path, got {value!r}")
            continue
        path = Path(value).expanduser()
        if files_in == IN_DATA_FOLDER:
            files[split] = str(value)
            continue
        if not path.is_absolute():
            path = Path(base_dir or ".") / path
        path = path.resolve()
        if not path.is_file():
            problem(split, f"file {str(path)!r} does not exist" + (" (it is a folder)" if path.is_dir() else ""))
        files[split] = str(path)
    if file_format is None and files and raw.get("separator"):
        file_format = "csv"  # a delimited file (.txt, .psv, ...): read as csv with its separator
    if file_format is None and files:
        suffixes = {EXTENSIONS.get(Path(p).suffix.lower()) for p in files.values()}
        if len(suffixes) != 1 or None in suffixes:
            problem("format", f"cannot tell the format from {', '.join(Path(p).name for p in files.values())}: give "
                              f"format: one of {', '.join(FORMATS)} (a delimited text file: separator: ';')")
        file_format = next(iter(suffixes)) or ""
        if file_format == "json" and any(looks_like_squad(Path(p)) for p in files.values()):
            file_format = "squad"  # SQuAD's nested JSON (data → paragraphs → qas), not a table of rows
    return files, file_format or ""


def hub_source(value, problem) -> HubSource | None:
    """A hub data set: its id alone, or a mapping of :data:`HUB_KEYS`."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, Mapping) or not isinstance(value.get("path"), str) or not value.get("path"):
        problem("hub", f"must be a mapping with path (a hub data set id), got {value!r}")
        return None
    unknown = [k for k in value if k not in HUB_KEYS]
    if unknown:
        problem("hub", f"unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(HUB_KEYS)})")
    columns = value.get("columns", {}) or {}
    if not isinstance(columns, Mapping):
        problem("hub.columns", f"must map hub columns to fields, got {columns!r}")
        columns = {}
    return HubSource(path=value["path"], name=value.get("name"), train_split=str(value.get("train_split", "train")),
                     validation_split=str(value.get("validation_split", "validation")),
                     columns={str(k): str(v) for k, v in columns.items()})


def glue_layout(value, file_format: str, problem) -> GlueLayout | None:
    """The layout of a GLUE-style TSV (``format: glue``): header or not, columns per row, field → column."""
    if value is None:
        if file_format == "glue":
            problem("glue", "format glue needs glue: {header, num_columns, columns}")
        return None
    if file_format != "glue" or not isinstance(value, Mapping) or set(value) - set(GLUE_KEYS):
        problem("glue", f"belongs to format glue, as a mapping of {', '.join(GLUE_KEYS)}; got {value!r}")
        return None
    header, columns, count = value.get("header", True), value.get("columns", {}), value.get("num_columns", 0)
    if not isinstance(header, bool):
        problem("glue", f"header: true or false (whether the first line names the columns), got {header!r}")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        problem("glue", f"num_columns: the number of columns every row has, got {count!r}")
    if not isinstance(columns, Mapping) or not all(
            isinstance(c, str) or (isinstance(c, int) and not isinstance(c, bool)) for c in columns.values()):
        problem("glue", f"columns: a mapping of field to column (header name or 0-based index), got {columns!r}")
        columns = {}
    return GlueLayout(header=header is not False, num_columns=count if isinstance(count, int) else 0,
                      columns=dict(columns))


def encoding_of(value, file_format: str, problem) -> str:
    """A text file's encoding, one Python knows (only csv, tsv and json have one to give)."""
    import codecs

    try:
        codecs.lookup(str(value))
    except LookupError:
        problem("encoding", f"{value!r} is not an encoding Python knows (e.g. utf-8, latin-1, cp1252)")
        return DEFAULT_ENCODING
    if str(value) != DEFAULT_ENCODING and file_format not in ("csv", "tsv", "json"):
        problem("encoding", f"only a csv, tsv or json file has an encoding to give; this one is {file_format!r}")
    return str(value)
