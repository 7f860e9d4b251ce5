"""Reading a task's train and validation splits, whatever their source, into one shape: the task's text fields and
``label`` (a class id or a score; QA: ``id``, ``question``, ``context``, ``answers``).

Files are read with ``datasets``' own builders (csv, tsv with quoting off, json/jsonl, parquet), a hub data set with
``datasets.load_dataset``, the paper's GLUE-layout files by :mod:`istar_tune.training.glue`. Every problem of a split
is reported at once (a missing field with the fields that exist, labels outside ``label_names``, a score that is no
number, an empty split, a validation label the training split never shows), and reading a definition *resolves* it:
its class names, split sizes and file checksums become part of it, so a trial on another node reads exactly the
files the search was planned on.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import datasets

from istar_tune.errors import ConfigError, DataError, IstarTuneError
from istar_tune.tasks import CLASSIFICATION, EXTRACTIVE_QA, REGRESSION, SPLITS, Task
from istar_tune.tasks.data_folder import GLUE_DIR_ENV, resolve_data_dir
from istar_tune.tasks.definition import label_text
from istar_tune.tasks.labels import (
    LabelColumn,
    case_variants,
    column_problems,
    distinct_labels,
    is_number,
    label_value,
    mixed_labels,
    one_based,
    read_column,
)
from istar_tune.tasks.task import DEFAULT_METRIC, IN_DATA_FOLDER, PAPER_FORMATS
from istar_tune.training.glue import PARSERS

MAX_ROWS_SHOWN = 5
"""Bad rows listed per split and problem (then a count of the rest)."""
QA_FIELDS = ("question", "context", "answers")


def load_raw(task: Task, data_dir: str | Path | None = None, max_train_samples: int | None = None,
             max_eval_samples: int | None = None) -> datasets.DatasetDict:
    """The task's train and validation splits as a ``DatasetDict`` (the first N rows of each when limited)."""
    return read_task(task, data_dir, max_train_samples, max_eval_samples)[1]


def resolve(task: Task, data_dir: str | Path | None = None) -> Task:
    """``task`` with what its data says (class names, split sizes, checksums); raises one :class:`ConfigError`
    listing every problem of its data."""
    return read_task(task, data_dir)[0]


def read_task(task: Task, data_dir: str | Path | None = None, max_train_samples: int | None = None,
              max_eval_samples: int | None = None) -> tuple[Task, datasets.DatasetDict]:
    """The resolved task and its splits (limited to the first N rows after every check of the whole split)."""
    files = task_files(task, data_dir)
    if files is None:
        loaded, checksums = _from_hub(task), {s: "hub" for s in SPLITS}
    else:
        loaded, checksums = _from_files(task, files), {s: file_checksum(p) for s, p in files.items()}
    problems = [f"{task.source}: {split} file {files[split] if files else ''}: changed since the task was resolved "
                f"({task.checksums[split]}, now {checksums[split]}): restore the file, or plan the search again"
                for split in SPLITS if task.checksums.get(split, checksums[split]) != checksums[split]
                and checksums[split] != "hub"]
    # One path: every format's table (files, the GLUE layout's parsers, the hub) takes the same checks.
    resolved, splits = _normalise(task, loaded, files, problems)
    if not task.shipped:  # the files' counts, not a definition's word, size the cost model
        problems += [f"{task.source}: examples: {split} {given:,}, but the data holds {len(splits[split]):,}: leave "
                     "examples out (the data is counted) or fix it" for split, given in
                     (("train", task.train_examples), ("validation", task.eval_examples))
                     if given and given != len(splits[split])]
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))  # one file as both splits: each problem once
    resolved = replace(resolved, checksums={**resolved.checksums, **{s: c for s, c in checksums.items()
                                                                       if c != "hub"}})
    # Sizes a definition gives stay (the paper's tasks give the published ones; the data read may be a subset).
    resolved = replace(resolved, train_examples=task.train_examples or len(splits["train"]),
                       eval_examples=task.eval_examples or len(splits["validation"]),
                       read_examples=(len(splits["train"]), len(splits["validation"])))
    for split, limit in (("train", max_train_samples), ("validation", max_eval_samples)):
        if limit is not None and limit < len(splits[split]):
            splits[split] = splits[split].select(range(limit))
    return resolved, datasets.DatasetDict(splits)


def task_files(task: Task, data_dir: str | Path | None) -> dict[str, Path] | None:
    """The task's split files (``None``: it is read from the hub); a clear error naming what is missing."""
    if task.files_in == IN_DATA_FOLDER:
        root = resolve_data_dir(data_dir)
        if root is None:
            if task.hub is None:
                raise DataError(f"{task.source}: task {task.name} reads its files from the data folder: give "
                                f"--data-dir DIR or set {GLUE_DIR_ENV}")
            return None
        files = {split: root / name for split, name in task.files.items()}
        missing = [str(path) for path in files.values() if not path.is_file()]
        if missing:
            raise DataError(f"{task.display_name} files not found: {', '.join(missing)}; the data directory must hold "
                            f"{task.files['train']} and {task.files['validation']} (the standard GLUE layout)")
        return files
    if not task.files:
        return None
    files = {split: Path(path) for split, path in task.files.items()}
    missing = [f"{split} file {str(path)!r}" for split, path in files.items() if not path.is_file()]
    if missing:
        raise DataError(f"{task.source}: {' and '.join(missing)} of task {task.name} do(es) not exist")
    return files


def file_checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _from_files(task: Task, files: dict[str, Path]) -> dict[str, datasets.Dataset]:
    if task.format in PAPER_FORMATS:
        return {split: _table(PARSERS[task.format](task, files[split]), files[split]) for split in SPLITS}
    # csv/tsv: a cell is what is written ('nan', 'NA' and '' are not turned into nulls the rule could not name).
    verbatim = {"keep_default_na": False}
    builder, options = {"csv": ("csv", dict(verbatim)), "tsv": ("csv", {"sep": "\t", "quoting": 3, **verbatim}),
                        "json": ("json", {}), "parquet": ("parquet", {})}[task.format]
    if task.format != "parquet":
        options["encoding"] = task.encoding
    if task.column_names:
        options["column_names"] = list(task.column_names)
    splits = {}
    headers = {split: _header(task, files[split]) for split in SPLITS} if task.format in ("csv", "tsv") else {}
    _check_headers(task, files, headers)
    for split in SPLITS:
        mixed = _mixed_json(task, files[split]) if task.format == "json" else None
        if mixed is not None:  # datasets' builder would coerce the mixture (a '-' among numbers read as 0)
            splits[split] = mixed
            continue
        try:
            with _quiet("datasets"):  # its own ERROR line would repeat, in library words, what is said below
                splits[split] = datasets.load_dataset(builder, data_files={split: str(files[split])}, split=split,
                                                      **options)
        except Exception as err:  # noqa: BLE001 — the builder's own words, on one line
            if isinstance(err, IstarTuneError):
                raise
            if "corresponds to no data" in str(err):  # a header and no rows: reported as an empty split
                splits[split] = datasets.Dataset.from_dict({})
                continue
            cause = _cause(err, task, files[split])
            raise DataError(f"{files[split]}: not a readable {task.format} file: {cause}") from None
        tabs = [c for c in splits[split].column_names if "\t" in c]
        if task.format == "csv" and tabs:
            raise DataError(f"{files[split]}: its header {tabs[0]!r} holds tabs, not commas: a tab-separated file "
                            "named .csv? give format: tsv (or name it .tsv)")
    return splits


def _mixed_json(task: Task, path: Path) -> datasets.Dataset | None:
    """A JSON (or JSON Lines) file whose fields mix kinds of values, read as written; ``None`` where every field
    holds one kind (the builder reads it). ``datasets``' json builder falls back to pandas on a mixture and coerces it
    silently (labels ``"-"`` and ``0`` come out as 0, 0): here the label field's mixture of scalars is kept as text
    (the label rule then reads it), a label that is a list or a mapping is refused, and another field that mixes
    kinds is refused, naming its rows."""
    import json

    try:
        text = path.read_text(encoding=task.encoding).lstrip("\ufeff")
        rows = json.loads(text) if text.lstrip().startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # the builder says what is wrong, with its line
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return None
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {name: [r.get(name) for r in rows] for name in names}
    kinds = {name: {_kind(v) for v in values if v is not None} for name, values in columns.items()}
    if all(len(found) <= 1 for found in kinds.values()):
        return None
    problems = []
    for name, values in columns.items():
        if len(kinds[name]) <= 1:
            continue
        if name == task.label_field and task.problem_type != EXTRACTIVE_QA:
            structured = [i for i, v in enumerate(values) if isinstance(v, (list, dict))]
            if structured:
                problems.append(f"{path}: rows {_rows(structured)}: the label is a list or a mapping: multi-label "
                                "classification is not supported (one label per row)")
            columns[name] = [v if v is None or isinstance(v, (list, dict)) else label_text(v) for v in values]
            continue
        by_kind: dict[str, list[int]] = {}
        for i, v in enumerate(values):
            if v is not None:
                by_kind.setdefault(_kind(v), []).append(i)
        shown = "; ".join(f"{kind} in rows {_rows(found)}" for kind, found in sorted(by_kind.items()))
        problems.append(f"{path}: field {name!r} holds values of different kinds ({shown}): write each field one way "
                        "(a text field holds text)")
    if problems:
        raise ConfigError(problems)
    return _table(columns, path)


def _table(columns: dict[str, list], path: Path) -> datasets.Dataset:
    """A parsed file's columns as a table; values of mixed kinds in one column are refused in one line."""
    try:
        return datasets.Dataset.from_dict(columns)
    except Exception as err:  # noqa: BLE001 — pyarrow's words (ArrowInvalid, ArrowTypeError), on one line
        text = " ".join(str(err).split())[:200]
        raise DataError(f"{path}: a field holds values of different kinds (text, numbers, null, lists): {text}; "
                        "write each field one way") from None


def _header(task: Task, path: Path) -> list[str]:
    """The first row of a csv/tsv file as its cells (the header unless ``column_names`` is given)."""
    import csv

    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            first = handle.readline().lstrip("\ufeff")
    except (UnicodeDecodeError, LookupError):
        return []  # said in the builder's own error, with the line and byte
    if task.format == "tsv":
        return [cell.strip() for cell in first.rstrip("\r\n").split("\t")] if first else []
    return [cell.strip() for cell in next(csv.reader([first]), [])]


HEADER_WORDS = 5
"""A header cell of this many words or more reads as a sentence: the first row is data, not a header."""


def _check_headers(task: Task, files: dict[str, Path], headers: dict[str, list[str]]) -> None:
    """A header with a column name twice is refused (which one is the label?); a first row that looks like data (a
    number or a sentence as a column name, or train and validation headers that differ) asks for ``column_names``."""
    if task.column_names:
        return
    problems = []
    for split, header in headers.items():
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            problems.append(f"{files[split]}: the header names {', '.join(map(repr, twice))} more than once: name each "
                            "column once")
    looks = {split: [c for c in header if is_number(c) or len(c.split()) >= HEADER_WORDS]
             for split, header in headers.items()}
    differ = len(headers) == 2 and all(headers.values()) and set(headers["train"]) != set(headers["validation"])
    if any(looks.values()) or differ:
        cells = next((cells for cells in looks.values() if cells), [])
        why = (f"{cells[0]!r} as a column name" if cells else
               f"train's header {', '.join(headers['train'])} against validation's {', '.join(headers['validation'])}")
        problems.append(f"{files['train']}: the first row looks like data ({why}): give the columns with "
                        "column_names: [...] in the task's definition (--column-names A,B on the command line)")
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))


def _undecodable(path: Path, encoding: str) -> str:
    """Where a file first fails to decode: ``line 51: byte 0xf0 ...`` ("" if it decodes)."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode(encoding)
            except UnicodeDecodeError as err:
                return f"line {number}: byte 0x{line[err.start:err.start + 1].hex()} cannot be decoded as {encoding}"
    return ""


def _cause(err: BaseException, task: Task, path: Path) -> str:
    """The innermost error under a builder's wrapper (``DatasetGenerationError`` says only that generating failed),
    on one line, with the way out where one is known."""
    chain = [err]
    while (chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    named = [e for e in chain if isinstance(e, UnicodeDecodeError) or "fields in line" in str(e)]
    causes = [err]
    while causes[-1].__cause__ is not None and len(causes) < 20:
        causes.append(causes[-1].__cause__)
    err = named[0] if named else causes[-1]
    text = " ".join(str(err).split())[:300]
    if isinstance(err, UnicodeDecodeError):
        return (f"{_undecodable(path, task.encoding) or text} (the file is not {task.encoding}: give its encoding in "
                "the task's definition, e.g. encoding: latin-1)")
    if "Expected" in text and "fields in line" in text:
        return (f"{type(err).__name__}: {text} (a row with more separators than the header: quote it, or is the "
                "file tab-separated? format: tsv)")
    return f"{type(err).__name__}: {text}"


@contextlib.contextmanager
def _quiet(logger: str):
    import logging

    log = logging.getLogger(logger)
    level, log.level = log.level, logging.CRITICAL
    try:
        yield
    finally:
        log.setLevel(level)


def _from_hub(task: Task) -> dict[str, datasets.Dataset]:
    hub = task.hub
    try:
        loaded = datasets.load_dataset(hub.path, hub.name)
    except Exception as err:  # noqa: BLE001 — any hub failure becomes one actionable line
        raise DataError(f"cannot load {task.display_name} from the Hugging Face hub ({hub.path}"
                        f"{'/' + hub.name if hub.name else ''}): {type(err).__name__}; pass --data-dir DIR or set "
                        f"{GLUE_DIR_ENV} to a folder in the GLUE layout, or give the task's files") from None
    splits = {}
    for split, name in (("train", hub.train_split), ("validation", hub.validation_split)):
        if name not in loaded:
            raise DataError(f"{task.source}: hub data set {hub.path} has no split {name!r} (it has "
                            f"{', '.join(loaded)}): set hub.{split}_split")
        data = loaded[name]
        for hub_name, ours in hub.columns.items():
            data = data.rename_column(hub_name, ours)
        splits[split] = data
    return splits


def _normalise(task: Task, loaded: dict[str, datasets.Dataset], files: dict[str, Path] | None,
               problems: list[str]) -> tuple[Task, dict[str, datasets.Dataset]]:
    """Check every split against the definition and bring it to the one shape; the resolved task."""
    where = {split: (str(files[split]) if files else f"hub {task.hub.path} split {split}") for split in SPLITS}
    for split in SPLITS:
        if len(loaded[split]) == 0:
            problems.append(f"{where[split]}: the {split} split is empty: give at least one example")
    if task.infer_problem_type and task.label_field in loaded["train"].column_names:
        task = _infer_problem_type(task, loaded["train"][task.label_field])
    text_fields = task.text_fields or _default_text_fields(task, loaded["train"], where["train"], problems)
    wanted = [*text_fields, task.label_field]
    for split in SPLITS:
        columns = loaded[split].column_names
        if not columns:
            continue  # empty: said above
        missing = [name for name in wanted if name not in columns]
        if missing:
            problems.append(f"{where[split]}: no field {', '.join(map(repr, missing))} (its fields: "
                            f"{', '.join(columns)}): set text_fields and label_field to fields that exist")
    if problems:
        return task, loaded
    task = replace(task, text_fields=text_fields)
    _check_text_fields(task, loaded, where, problems)
    if problems:
        return task, loaded
    if task.problem_type == EXTRACTIVE_QA:
        return task, {split: _qa_split(task, loaded[split], where[split], problems) for split in SPLITS}
    columns = {split: read_column(loaded[split][task.label_field], task.drop_labels) for split in SPLITS}
    if task.problem_type == CLASSIFICATION:
        for split in SPLITS:  # rows without a label; the other rows are still read (their problems said too)
            problems += column_problems(columns[split], where[split], _rows)
        before = len(problems)
        task = _classes(task, columns, where, problems)
        if len(problems) > before:  # the classes themselves are in doubt: no row is read against them
            return task, loaded
    splits, dropped = {}, []
    for split in SPLITS:
        data, column = loaded[split], columns[split]
        if task.problem_type == CLASSIFICATION:
            keep = [i for i, text in enumerate(column.texts) if text is not None]
            dropped.append(len(data) - len(keep))
            if len(keep) < len(data):
                data = data.select(keep)
            raw = [column.texts[i] for i in keep]
        else:
            raw = data[task.label_field]
        labels = _labels(task, raw, where[split], split, problems,
                         origin=keep if task.problem_type == CLASSIFICATION else None)
        splits[split] = data.select_columns(list(text_fields)).add_column("label", labels)
        if split == "train" and task.problem_type == REGRESSION and labels:
            task = replace(task, observed_scores=(min(labels), max(labels)))
    if task.problem_type == CLASSIFICATION:
        task = replace(task, dropped=(dropped[0], dropped[1]))
        trained = set(splits["train"]["label"]) if not problems else set()
        if len(trained) == 1:
            problems.append(f"{where['train']}: every training label is {task.label_names[next(iter(trained))]!r}: a "
                            "classifier needs two classes or more (check label_field, or the file)")
    return task, splits


def _check_text_fields(task: Task, loaded: dict[str, datasets.Dataset], where: dict[str, str],
                       problems: list[str]) -> None:
    """Every text field (a QA task's question and context too) holds text: a null, a number, a list or a mapping in
    one is refused, naming the field and its rows; so is a cell over :data:`MAX_CELL_CHARS`."""
    for split in SPLITS:
        data = loaded[split]
        for name in task.text_fields:
            values = data[name]
            empty = [i for i, value in enumerate(values) if value is None or value == ""]
            if empty:
                problems.append(f"{where[split]}: rows {_rows(empty)}: text field {name!r} is empty")
            other = [i for i, value in enumerate(values) if value is not None and not isinstance(value, str)]
            if other:
                kinds = sorted({_kind(values[i]) for i in other})
                problems.append(f"{where[split]}: rows {_rows(other)}: text field {name!r} holds {', '.join(kinds)}, "
                                "not text: a model reads text; name a text field with text_fields, or write it as "
                                "text")
            sizes = [len(value) if isinstance(value, str) else 0 for value in values]
            longest = max(range(len(sizes)), key=sizes.__getitem__, default=0)
            if sizes and sizes[longest] > MAX_CELL_CHARS:
                problems.append(f"{where[split]}: row {longest + 1}: text field {name!r} holds "
                                f"{sizes[longest]:,} characters, over {MAX_CELL_CHARS:,} a cell (a model reads "
                                "max_length tokens of it; every trial would hold it whole): cut it, or split it into "
                                "rows")


def _kind(value) -> str:
    if isinstance(value, bool):
        return "yes/no values"
    if isinstance(value, (int, float)):
        return "numbers"
    if isinstance(value, (list, tuple)):
        return "lists"
    if isinstance(value, dict):
        return "mappings (nested objects)"
    if isinstance(value, str):
        return "text"
    return type(value).__name__


def _classes(task: Task, columns: dict[str, LabelColumn], where: dict[str, str], problems: list[str]) -> Task:
    """The label rule's class checks (:mod:`istar_tune.tasks.labels`): the task with its class names."""
    train, dev = columns["train"], columns["validation"]
    if not task.label_names:
        task = replace(task, label_names=distinct_labels(train.texts, train.numeric))
        if mixed := mixed_labels(task.label_names):
            problems.append(f"{where['train']}: {mixed}")
        for variants in case_variants(task.label_names):
            problems.append(f"{where['train']}: labels {', '.join(map(repr, variants))} differ only in case: are they "
                            "one class? write them one way, or declare each with label_names: [...]")
        if dev.numeric and not train.numeric and any(t is not None for t in train.texts):
            shown = ", ".join(sorted({t for t in dev.texts if t is not None}, key=float)[:3])
            problems.append(f"{where['validation']}: its labels are numbers ({shown}) where the training split's are "
                            f"words ({', '.join(task.label_names[:3])}): no index is guessed; write the same labels "
                            "in both, or give label_names: [...] (then a number in 0..N-1 names the class at that "
                            "index)")
        if task.metric == "f1" and len(task.label_names) != 2:
            problems.append(f"{task.source}: metric: f1 is binary F1, but the training split has "
                            f"{len(task.label_names)} classes ({', '.join(task.label_names)}): use f1_macro")
        elif task.positive_label and task.positive_label not in task.label_names:
            problems.append(f"{task.source}: positive_label {task.positive_label!r} is not a class of the training "
                            f"split ({', '.join(task.label_names)})")
    elif not task.label_values and one_based(train.texts, train.numeric, task.label_names):
        names = task.label_names
        problems.append(f"{where['train']}: labels 1..{len(names)} against label_names {list(names)} look 1-based, "
                        "but a list's labels are 0-based indices: give a mapping, label_names: {1: "
                        f"{names[0]}, 2: {names[1]}, ...}}")
    return task


INFERRED_CLASSES_HINT = 10
"""Whole-number labels with more distinct values than this are read as classes with a hint that they may be scores."""


def _infer_problem_type(task: Task, labels: list) -> Task:
    """The problem type the training labels say, as ``datasets`` read them (``run_glue.py`` asks the column's dtype):
    numbers with decimals are scores (regression, metric pearson); whole numbers, words or yes/no are classes."""
    column = read_column(labels)  # numbers written as text ("3.8") are numbers too
    values = [float(t) for t in column.texts if t is not None] if column.numeric else [
        t for t in column.texts if t is not None]
    numbers = column.numeric
    if numbers and any(not v.is_integer() for v in values):
        why = "labels are numbers with decimals; if they are classes, say problem_type: classification"
        return replace(task, problem_type=REGRESSION, metric=DEFAULT_METRIC[REGRESSION], infer_problem_type=False,
                       inferred=why)
    distinct = len(set(values))
    why = "labels are whole numbers" if numbers else "labels are words"
    if numbers and distinct > INFERRED_CLASSES_HINT:
        why += (f", {distinct} distinct: if they are scores, say problem_type: regression (--problem-type "
                "regression)")
    return replace(task, infer_problem_type=False, inferred=why)


def _default_text_fields(task: Task, train: datasets.Dataset, where: str, problems: list[str]) -> tuple[str, ...]:
    """The input fields when the definition names none: the one field besides the label, or ``sentence1`` and
    ``sentence2`` when they are the only two. Anything else is refused, naming the fields (``run_glue.py`` would take
    the first two: a second label column or an id would become model input), and so is a field whose values decide
    the label (every value of it belongs to one class)."""
    if not train.column_names or task.label_field not in train.column_names:
        return ()  # an empty split, or no label field: said where the fields are checked
    others = [c for c in train.column_names if c != task.label_field]
    if len(others) == 1 or sorted(others) == ["sentence1", "sentence2"]:
        fields = ("sentence1", "sentence2") if len(others) == 2 else (others[0],)
    else:
        if not others:
            problems.append(f"{where}: the data has no field besides the label {task.label_field!r} "
                            f"({', '.join(train.column_names) or 'no fields'}): nothing for the model to read; add the "
                            "text, or name its field with text_fields (a headerless file: column_names)")
        else:
            problems.append(f"{where}: which fields are the input? Besides the label {task.label_field!r} the data "
                            f"has {len(others)} fields ({', '.join(others)}): name the input with text_fields: [...] "
                            "(--text-fields A[,B] on the command line)")
        return ()
    if task.problem_type == CLASSIFICATION and task.label_field in train.column_names:
        for field in fields:
            if _decides(train[field], train[task.label_field]):
                problems.append(f"{where}: field {field!r} decides the label (each of its values belongs to one "
                                "class): it is not taken as input unless named with text_fields (--text-fields)")
    return fields


CATEGORY_ROWS = 5
"""A column with at most one distinct value per this many rows is a category, not a text (rows repeated two or three
times leave a text column a text)."""


def _decides(values: list, labels: list) -> bool:
    """Whether a column is a category (:data:`CATEGORY_ROWS`) whose every value belongs to one class."""
    classes: dict[str, set[str]] = {}
    for value, label in zip(values, labels):
        classes.setdefault(label_text(value), set()).add(label_text(label))
    return 2 <= len(classes) <= len(values) / CATEGORY_ROWS and all(len(c) == 1 for c in classes.values())


def _labels(task: Task, values: list, where: str, split: str, problems: list[str],
            origin: list[int] | None = None) -> list:
    """Each value's label id or score; the rows (of the file: ``origin`` maps kept rows back) whose value is not one
    are reported once per split."""
    out, bad, reasons = [], {}, {}
    for index, value in enumerate(values):
        try:
            out.append(label_value(task, value, where))
        except DataError as err:
            bad.setdefault(label_text(value), []).append(origin[index] if origin is not None else index)
            reason = str(err).split(": ", 1)[-1].replace(repr(value), "{}", 1)
            reasons.setdefault(reason, {}).setdefault(repr(value), []).append(
                origin[index] if origin is not None else index)
            out.append(0)
    if bad:  # one problem per split: its rows and its first few bad values
        rows = sorted(i for indices in bad.values() for i in indices)
        values = ", ".join(repr(v) for v in list(bad)[:MAX_ROWS_SHOWN])
        values += f" and {len(bad) - MAX_ROWS_SHOWN} more" if len(bad) > MAX_ROWS_SHOWN else ""
        plural = len(bad) > 1
        if task.problem_type == REGRESSION:  # each reason once (not a number, not finite, off the scale)
            for reason, found in reasons.items():
                shown = ", ".join(list(found)[:MAX_ROWS_SHOWN]) + (
                    f" and {len(found) - MAX_ROWS_SHOWN} more" if len(found) > MAX_ROWS_SHOWN else "")
                problems.append(f"{where}: rows {_rows(sorted(r for rs in found.values() for r in rs))}: "
                                + reason.replace("{}", shown, 1))
        else:
            declared = task.indexed_labels or bool(task.label_values)  # else the classes are the training split's
            unseen = " (the training split never shows it)" if split == "validation" and not plural else ""
            unseen = " (the training split never shows them)" if split == "validation" and plural else unseen
            unseen = "" if declared else unseen
            shown = task.label_values or task.label_names
            problems.append(f"{where}: rows {_rows(rows)}: label{'s' if plural else ''} {values} "
                            f"{'are' if plural else 'is'} not one of {', '.join(shown)}{unseen}")
    return out


MAX_CELL_CHARS = 1_000_000
"""The most characters one text cell may hold (a 512-token window reads about 3,000)."""


def _rows(indices: list[int]) -> str:
    shown = ", ".join(str(i + 1) for i in indices[:MAX_ROWS_SHOWN])
    more = f" and {len(indices) - MAX_ROWS_SHOWN} more" if len(indices) > MAX_ROWS_SHOWN else ""
    return shown + more


def _qa_split(task: Task, data: datasets.Dataset, where: str, problems: list[str]) -> datasets.Dataset:
    """A QA split as SQuAD's columns: ``id``, ``question``, ``context``, ``answers = {text, answer_start}``."""
    question, context = task.text_fields
    bad = [i for i, a in enumerate(data[task.label_field])
           if not isinstance(a, dict) or not isinstance(a.get("text"), list)
           or len(a.get("text", [])) != len(a.get("answer_start", []) or [])]
    if bad:
        problems.append(f"{where}: rows {_rows(bad)}: {task.label_field} must be {{text: [...], answer_start: "
                        "[...]}} of the same length")
        return data
    given = data["id"] if "id" in data.column_names else list(range(len(data)))
    nulls = [row for row, value in enumerate(given) if value is None or str(value).strip() == ""]
    if nulls:
        problems.append(f"{where}: rows {_rows(nulls)}: no id: each question needs its own id (answers are scored per "
                        "id)")
    ids = [str(i) for i in given]
    _check_answers(data[context], data[task.label_field], where, task.label_field, problems)
    counts = Counter(ids)
    twice = sorted(i for i, count in counts.items() if count > 1)
    if twice:
        problems.append(f"{where}: ids {', '.join(twice[:MAX_ROWS_SHOWN])} repeat: each question needs its own id "
                        "(answers are scored per id)")
    return datasets.Dataset.from_dict({"id": ids, "question": data[question], "context": data[context],
                                       "answers": data[task.label_field]})


def _check_answers(contexts: list, answers: list, where: str, field: str, problems: list[str]) -> None:
    """Each question has an answer, and each answer is its context's text at its ``answer_start`` (else every window
    of it would be read as "no answer", or train towards the wrong span)."""
    empty, off, untyped = [], [], []
    for row, (context, answer) in enumerate(zip(contexts, answers)):
        if not answer["text"]:
            empty.append(row)
        elif not all(isinstance(text, str) and isinstance(start, int) and not isinstance(start, bool)
                     for text, start in zip(answer["text"], answer["answer_start"])):
            untyped.append(row)
        elif any(context[start:start + len(text)] != text
                 for text, start in zip(answer["text"], answer["answer_start"])):
            off.append(row)
    if empty:
        problems.append(f"{where}: rows {_rows(empty)}: no answer: an extractive QA question needs at least one answer "
                        "in its context (unanswerable questions, SQuAD v2's is_impossible, are not supported: remove "
                        "those rows)")
    if untyped:
        problems.append(f"{where}: rows {_rows(untyped)}: {field}: each answer's text must be text and its "
                        "answer_start a whole number (a null, a number or a string found)")
    if off:
        problems.append(f"{where}: rows {_rows(off)}: {field}: the context does not hold the answer text at its "
                        "answer_start (a shifted offset, an answer past the context's end, or text not in it)")
