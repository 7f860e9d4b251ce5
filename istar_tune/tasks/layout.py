"""How a task's data is laid out, as its definition says it: the split files (relative to the definition's folder, or
to the data folder) and their format (from the extension unless given; a delimited text file with a ``separator`` is
read as csv), a csv-style file's separator, the text encoding, a hub data set, the GLUE layout of a TSV. Each reports
what is wrong through the definition's ``problem(key, text)``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from istar_tune.tasks.task import DEFAULT_ENCODING, IN_DATA_FOLDER, SPLITS, GlueLayout, HubSource

HUB_KEYS = ("path", "name", "train_split", "validation_split", "columns")
GLUE_KEYS = ("header", "num_columns", "columns")
SEPARATORS_REFUSED = "\"\r\n"
"""Characters a separator cannot be (they quote cells or end rows)."""


def formats():
    """The registry of formats (:mod:`istar_tune.data.registry`), imported when a definition is read: the format
    modules read their tasks through this package, which must be whole first."""
    from istar_tune.data import registry

    return registry


def takes(file_format: str, key: str) -> bool:
    """Whether a format takes a definition key of its own (``encoding``, ``separator``, ``column_names``, ``glue``)."""
    registry = formats()
    return file_format in registry.names() and key in registry.get(file_format).keys


def with_key(key: str) -> list[str]:
    """The formats that take ``key``."""
    registry = formats()
    return [name for name in registry.names() if key in registry.get(name).keys]


def problem_type_held(file_format: str) -> str:
    """The one problem type a format's files hold (SQuAD's: extractive QA); empty: any."""
    registry = formats()
    return registry.get(file_format).problem_type if file_format in registry.names() else ""


def separator_of(value, file_format: str, problem) -> str:
    """A csv-style file's one-character separator (``""``: the format's own)."""
    if value in ("", None):
        return ""
    if not isinstance(value, str) or len(value) != 1 or value in SEPARATORS_REFUSED or not takes(
            file_format, "separator"):
        problem("separator", f"one character that is not a quote or a line break, for a delimited file (format "
                             f"{', '.join(with_key('separator'))}; a tsv file is tab-separated), got {value!r} for "
                             f"format {file_format or 'none'}")
        return ""
    return value


def files_and_format(raw: Mapping[str, Any], base_dir, files_in: str, problem) -> tuple[dict[str, Any], str]:
    """The split files (absolute; as given when they are in the data folder; a mapping of field to file for parallel
    files) and their format: as given, ``csv`` for a file with a ``separator``, ``lines`` for splits given as
    mappings, else from the extensions (a file a format claims, SQuAD's nested JSON, is that format)."""
    registry = formats()
    given = {split: raw[split] for split in SPLITS if split in raw}
    file_format = raw.get("format")
    if file_format is not None and file_format not in registry.names():
        problem("format", f"must be one of {', '.join(registry.names())}, got {file_format!r}")
        file_format = None
    if not given:
        return {}, file_format or ""
    one_file = raw.get("validation_split") is not None or raw.get("split_field") is not None
    splits = ("train",) if one_file else SPLITS
    if "validation" in given and one_file:
        key = "validation_split" if raw.get("validation_split") is not None else "split_field"
        problem(key, "draws the validation rows from the train file: give it or a validation file, not both")
    files: dict[str, Any] = {}
    for split in splits:
        value = given.get(split)
        if isinstance(value, Mapping) and value:
            parts = {str(field): _path(path, f"{split}.{field}", base_dir, files_in, problem)
                     for field, path in value.items()}
            files[split] = parts if None not in parts.values() else None
        elif isinstance(value, (list, tuple)) or _is_glob(value, files_in):
            files[split] = _paths(value, split, base_dir, files_in, problem)
        else:
            files[split] = _path(value, split, base_dir, files_in, problem)
    files = {split: path for split, path in files.items() if path is not None}
    mappings = {split for split, value in files.items() if isinstance(value, dict)}
    if mappings and any(isinstance(value, list) for value in files.values()):
        problem("format", "parallel files (a mapping of field to file) take one file a field: join the parts, or "
                          "give each split as one table file")
    if file_format is None and files and mappings:
        file_format = registry.PARALLEL  # parallel files, a field each
    if file_format is None and files and raw.get("separator"):
        file_format = registry.DELIMITED  # a delimited file (.txt, .psv, ...): read as csv with its separator
    if file_format is None and files:
        every = [p for value in files.values() for p in (value if isinstance(value, list) else [value])]
        found = {registry.from_extension(Path(p)) for p in every}
        if len(found) != 1 or None in found:
            problem("format", f"cannot tell the format from {', '.join(Path(p).name for p in every)}: give "
                              f"format: one of {', '.join(registry.names())} (a delimited text file: separator: ';')")
        file_format = next(iter(found)) or ""
    _check_parts(files, mappings, file_format, problem)
    return files, file_format or ""


GLOB_CHARACTERS = "*?["
"""A split's path holding one of these is a pattern (``data/train-*.csv``): the files it matches, in name order."""


def _is_glob(value, files_in: str) -> bool:
    """Whether a split's path is a pattern (files of the data folder are named, never matched)."""
    return isinstance(value, str) and files_in != IN_DATA_FOLDER and any(c in value for c in GLOB_CHARACTERS)


def _paths(value, key: str, base_dir, files_in: str, problem) -> list[str] | str | None:
    """A split's parts, read in this order and joined: a list of paths, or a pattern's matches in name order (a
    pattern matching one file is that file). ``None`` with its problem said."""
    if isinstance(value, str):
        pattern = Path(value).expanduser()
        root = pattern.anchor if pattern.is_absolute() else Path(base_dir or ".")
        relative = str(pattern.relative_to(pattern.anchor)) if pattern.is_absolute() else str(pattern)
        matched = sorted(str(p.resolve()) for p in Path(root).glob(relative) if p.is_file())
        if not matched:
            problem(key, f"no file matches {value!r} (in {str(Path(root).resolve())!r}): check the pattern")
            return None
        return matched[0] if len(matched) == 1 else matched
    if not value or not all(isinstance(part, (str, Path)) and str(part) for part in value):
        problem(key, f"a list of the {key} split's files (read in order and joined), got {list(value)!r}")
        return None
    paths = [_path(part, key, base_dir, files_in, problem) for part in value]
    if None in paths:
        return None
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        problem(key, f"names {', '.join(map(repr, twice))} more than once: each file once")
        return None
    return paths[0] if len(paths) == 1 else paths


def _path(value, key: str, base_dir, files_in: str, problem) -> str | None:
    """One file's path (absolute; as given in the data folder), or ``None`` with its problem said."""
    if not isinstance(value, (str, Path)) or not str(value):
        problem(key, f"give the {key} file's path, got {value!r}")
        return None
    if files_in == IN_DATA_FOLDER:
        return str(value)
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or ".") / path
    path = path.resolve()
    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        problem(key, f"{str(path)!r} is a folder saved by datasets' save_to_disk, not a file: write each split as one "
                     "file, datasets.load_from_disk(folder)['train'].to_parquet('train.parquet'), and give those files")
    elif not path.is_file():
        problem(key, f"file {str(path)!r} does not exist" + (" (it is a folder)" if path.is_dir() else ""))
    return str(path)


def _check_parts(files: dict[str, Any], mappings: set[str], file_format: str, problem) -> None:
    """Splits given as mappings of field to file belong to a format of parallel files, both with the same fields."""
    registry = formats()
    parts = bool(file_format) and file_format in registry.names() and registry.get(file_format).parts
    if parts and len(mappings) < len(files):
        problem("format", f"{file_format}: give each split as a mapping of field to file ({{text: train.txt, "
                          "label: train.labels}})")
    elif mappings and not parts:
        problem("format", f"a split given as a mapping of field to file is read as parallel files (format: lines), "
                          f"not {file_format}")
    elif len(mappings) == 2 and list(files["train"]) != list(files["validation"]):
        problem("validation", f"the same fields as train, in the same order ({', '.join(files['train'])}), got "
                              f"{', '.join(files['validation'])}")


def split_share(raw: Mapping[str, Any], problem) -> tuple[float, int]:
    """``validation_split`` (a share in (0, 1), or a count of rows) and ``split_seed`` (default 0)."""
    share, seed = raw.get("validation_split"), raw.get("split_seed", 0)
    if share is None:
        if "split_seed" in raw:
            problem("split_seed", "seeds validation_split, which this definition does not give")
        return 0.0, 0
    whole = isinstance(share, (int, float)) and share >= 1 and float(share).is_integer()
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not (whole or 0 < share < 1):
        problem("validation_split", f"a share of the train file's rows in (0, 1) (0.1) or a count of rows (500), got "
                                    f"{share!r}")
        share = 0.0
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        problem("split_seed", f"a whole number ≥ 0, got {seed!r}")
        seed = 0
    return float(share), seed


SPLIT_VALUES = {"train": ("train",), "validation": ("validation", "dev", "val")}
"""What a split column's values mean by default (a corpus' ``train``/``dev``/``test`` column): each split's values."""


def split_column(raw: Mapping[str, Any], problem) -> tuple[str, dict[str, tuple[str, ...]]]:
    """``split_field`` (the column naming each row's split) and ``split_values`` (each split's values; default
    :data:`SPLIT_VALUES`)."""
    field, values = raw.get("split_field"), raw.get("split_values")
    if field is None:
        if values is not None:
            problem("split_values", "names the values of split_field, which this definition does not give")
        return "", {}
    if not isinstance(field, str) or not field.strip():
        problem("split_field", f"the name of the column that names each row's split, got {field!r}")
        return "", {}
    if raw.get("validation_split") is not None:
        problem("split_field", "and validation_split both make the validation split: give one of them")
    values = SPLIT_VALUES if values is None else values
    if not isinstance(values, Mapping) or set(values) != set(SPLIT_VALUES):
        problem("split_values", f"a mapping of train and validation to their values ({{train: [train], validation: "
                                f"[dev]}}), got {values!r}")
        return field, {}
    read = {split: tuple(str(v) for v in (given if isinstance(given, (list, tuple)) else [given]))
            for split, given in values.items()}
    if set(read["train"]) & set(read["validation"]):
        problem("split_values", f"a value means one split, got {sorted(set(read['train']) & set(read['validation']))} "
                                "in both")
    return field, {split: read[split] for split in SPLITS}


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
        if takes(file_format, "glue"):
            problem("glue", f"format {file_format} needs glue: {{header, num_columns, columns}}")
        return None
    if not takes(file_format, "glue") or not isinstance(value, Mapping) or set(value) - set(GLUE_KEYS):
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
    if str(value) != DEFAULT_ENCODING and not takes(file_format, "encoding"):
        problem("encoding", f"only a text file's format ({', '.join(with_key('encoding'))}) has an encoding to give; "
                            f"this one is {file_format!r}")
    return str(value)
