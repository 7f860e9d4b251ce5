"""Reading one file with a ``datasets`` builder (csv, parquet), its failure said in one line: the innermost cause under
the builder's wrapper, with the way out where one is known, and the builder's own ERROR log line kept quiet."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from istar_tune.data.text_files import undecodable
from istar_tune.errors import DataError, IstarTuneError
from istar_tune.tasks.task import Task


def build(task: Task, builder: str, path: Path, options: dict):
    """``path`` read by ``datasets.load_dataset(builder, ...)`` as one split (a header and no rows: an empty table)."""
    import datasets

    name = re.sub(r"\W+", "_", path.stem).strip("_")  # its progress bar: "Generating dev split"
    name = name if name and name.lower() != "all" else "rows"  # "all" is datasets' union of every split
    try:
        with _quiet("datasets"):  # its own ERROR line would repeat, in library words, what is said below
            return datasets.load_dataset(builder, data_files={name: str(path)}, split=name, **options)
    except Exception as err:  # noqa: BLE001 — the builder's own words, on one line
        if isinstance(err, IstarTuneError):
            raise
        if "corresponds to no data" in str(err):  # a header and no rows: reported as an empty split
            return datasets.Dataset.from_dict({})
        raise DataError(f"{path}: not a readable {task.format} file: {cause(err, task, path)}") from None


def cause(err: BaseException, task: Task, path: Path) -> str:
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
