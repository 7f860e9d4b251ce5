"""Reading a task's train and validation splits, whatever their source, into one shape: the task's text fields and
``label`` (a class id or a score; QA: ``id``, ``question``, ``context``, ``answers``).

Files are read with ``datasets``' own builders (csv, tsv with quoting off and every cell as written, json/jsonl,
parquet; a JSON file whose fields mix kinds as written, which the builder would coerce), a hub data set with
``datasets.load_dataset``, the paper's GLUE-layout files by :mod:`istar_tune.training.paper_files`. Every format's
table then takes the one checker (:mod:`istar_tune.training.checking`), and reading a definition *resolves* it:
its class names, split sizes and file checksums become part of it, so a trial on another node reads exactly the
files the search was planned on.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import replace
from pathlib import Path

import datasets

from istar_tune.errors import ConfigError, DataError, IstarTuneError
from istar_tune.tasks import SPLITS, Task
from istar_tune.tasks.data_folder import GLUE_DIR_ENV, resolve_data_dir
from istar_tune.tasks.labels import is_number
from istar_tune.tasks.task import IN_DATA_FOLDER, PAPER_FORMATS
from istar_tune.training.checking import cut_problems, normalise, where_of
from istar_tune.training.json_files import read_json, table, undecodable
from istar_tune.training.paper_files import PARSERS
from istar_tune.training.rows import rows_text


def load_raw(task: Task, data_dir: str | Path | None = None, max_train_samples: int | None = None,
             max_eval_samples: int | None = None, trains: bool = True) -> datasets.DatasetDict:
    """The task's train and validation splits as a ``DatasetDict`` (the first N rows of each when limited;
    ``trains=False``: nothing trains on the training split, whose cut is then not checked)."""
    return read_task(task, data_dir, max_train_samples, max_eval_samples, trains)[1]


def resolve(task: Task, data_dir: str | Path | None = None) -> Task:
    """``task`` with what its data says (class names, split sizes, checksums); raises one :class:`ConfigError`
    listing every problem of its data."""
    return read_task(task, data_dir)[0]


def read_task(task: Task, data_dir: str | Path | None = None, max_train_samples: int | None = None,
              max_eval_samples: int | None = None, trains: bool = True) -> tuple[Task, datasets.DatasetDict]:
    """The resolved task and its splits: limited to the first N rows after every check of the whole split, and what
    a limit leaves checked again (an empty split, one training class, a constant score)."""
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
    resolved, splits = normalise(task, loaded, files, problems)
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
    cut = {}
    for split, limit in (("train", max_train_samples), ("validation", max_eval_samples)):
        if limit is not None and limit < len(splits[split]):
            splits[split] = splits[split].select(range(limit))
            if trains or split != "train":
                cut[split] = splits[split]
    if cut:  # every check the whole split passed, again on what the limits leave
        names = {"train": f"max_train_samples {max_train_samples}",
                 "validation": f"max_eval_samples {max_eval_samples}"}
        problems = [p for split, data in cut.items() for p in cut_problems(
            resolved, {split: data}, where_of(task, files), f"the first {len(data):,} rows ({names[split]})")]
        if problems:
            raise ConfigError(problems)
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
        return {split: table(PARSERS[task.format](task, files[split]), files[split]) for split in SPLITS}
    # csv/tsv: a cell is what is written ('nan', 'NA' and '' are not turned into nulls the rule could not name).
    verbatim = {"keep_default_na": False}
    builder, options = {"csv": ("csv", {"sep": task.separator or ",", **verbatim}),
                        "tsv": ("csv", {"sep": "\t", "quoting": 3, **verbatim}),
                        "json": ("json", {}), "parquet": ("parquet", {})}[task.format]
    if task.format != "parquet":
        options["encoding"] = task.encoding
    if task.column_names:
        options["column_names"] = list(task.column_names)
    splits = {}
    headers = {split: _header(task, files[split]) for split in SPLITS} if task.format in ("csv", "tsv") else {}
    for split in SPLITS if task.format != "parquet" else ():
        _not_text(task, files[split])
    _check_headers(task, files, headers)
    for split, header in headers.items():
        _field_counts(task, files[split], len(task.column_names or header))
    for split in SPLITS:
        if task.format == "json":  # parsed once, by one parser: datasets' builder would coerce a mixture
            splits[split] = read_json(task, files[split])
            continue
        if task.format == "parquet" and _parquet_rows(files[split]) == 0:  # the builder's error would hide it
            splits[split] = datasets.Dataset.from_dict({})
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


def _header(task: Task, path: Path) -> list[str]:
    """The first row of a csv/tsv file as its cells (the header unless ``column_names`` is given)."""
    try:
        with open(path, encoding=task.encoding, newline="") as handle:
            first = handle.readline().lstrip("\ufeff")
    except (UnicodeDecodeError, LookupError):
        return []  # said in the builder's own error, with the line and byte
    if task.format == "tsv":
        return [cell.strip() for cell in first.rstrip("\r\n").split("\t")] if first else []
    return [cell.strip() for cell in next(_csv_rows([first], task), [])]


HEADER_WORDS = 5
"""A header cell of this many words or more reads as a sentence: the first row is data, not a header."""


MAGIC = ((b"PK\x03\x04", "an Excel workbook (.xlsx) or a zip archive", "save it as CSV (in Excel: Save As, CSV UTF-8), "
          "or unzip it"),
         (b"\xd0\xcf\x11\xe0", "an Excel 97-2003 workbook (.xls)", "save it as CSV (in Excel: Save As, CSV UTF-8)"),
         (b"PAR1", "a parquet file", "name it .parquet, or give format: parquet"),
         (b"\x1f\x8b", "a gzip-compressed file", "decompress it (gunzip)"))
"""A file's first bytes that say it is not text, what it is, and the way out."""


def _not_text(task: Task, path: Path) -> None:
    """A binary file under a text format's name (an Excel workbook saved as ``.csv``) refused, saying what it is."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    for magic, what, fix in MAGIC:
        if head.startswith(magic):
            raise DataError(f"{path}: {what}, not a {task.format} file: {fix}")


def _csv_rows(lines, task: Task):
    """A csv file's rows with the task's separator; a cell as long as any the checker lets through is read (Python's
    csv module stops at 128 KiB by default, where pandas reads on)."""
    import csv

    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    return csv.reader(lines, delimiter=task.separator or ",")


def _parquet_rows(path: Path) -> int | None:
    """A parquet file's row count from its footer (``None``: not readable as parquet; the builder says why)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # noqa: BLE001 — said by the builder, in its words
        return None


def _field_counts(task: Task, path: Path, expected: int) -> None:
    """Every row of a csv/tsv file has as many fields as its names (pandas would make the first of one more field a
    row index and shift every column, or fill one fewer with nulls): the rows that do not are refused in one line."""
    import csv

    if not expected:
        return
    bad, counts = [], set()
    with open(path, encoding=task.encoding, newline="") as handle:
        records = (line.rstrip("\r\n").split("\t") if line.strip("\r\n") else [] for line in handle) if (
            task.format == "tsv") else _csv_rows(handle, task)
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
               task.format == "tsv" else f"a {sep!r} inside a cell that is not quoted? quote that cell (\"a{sep} b\")")
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
        return (f"{undecodable(path, task.encoding) or text} (the file is not {task.encoding}: give its encoding in "
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
