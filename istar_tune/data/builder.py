"""Reading one file with a ``datasets`` builder (parquet's), its failure said in one line: the innermost cause under
the builder's wrapper, and the builder's own ERROR log line kept quiet."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

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
        raise DataError(f"{path}: not a readable {task.format} file: {cause(err)}") from None


def cause(err: BaseException) -> str:
    """The innermost error under a builder's wrapper (``DatasetGenerationError`` says only that generating failed), on
    one line."""
    while err.__cause__ is not None:
        err = err.__cause__
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


@contextlib.contextmanager
def _quiet(logger: str):
    import logging

    log = logging.getLogger(logger)
    level, log.level = log.level, logging.CRITICAL
    try:
        yield
    finally:
        log.setLevel(level)
