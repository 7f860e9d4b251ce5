"""What a data format is: a record the reading path looks up by name (:mod:`istar_tune.data.registry`), never a string
compared in its code. A format names its extensions, the definition keys it takes, what it checks of a task's files
before any is read, and how it reads one split's file into columns; every format's table then takes the one checker
(:mod:`istar_tune.data.checking`). A new format is one module and one :func:`~istar_tune.data.registry.register`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from istar_tune.errors import DataError

if TYPE_CHECKING:
    import datasets

    from istar_tune.tasks.task import Task

Source = Path | dict[str, Path]
"""Where one split is: a file, or (a format of parallel files) a mapping of field to file. A split given in parts
(a list of files) is read a part at a time, each part a :data:`Source`, and joined."""
Columns = dict[str, list]


@dataclass(frozen=True)
class Format:
    """One data format."""

    name: str
    """What a definition's ``format:`` says (``csv``)."""
    read: Callable[[Task, Source], datasets.Dataset | Columns]
    """One split's rows: a table, or columns of the task's fields as written (the checker reads their labels)."""
    describes: str
    """One line for the reference and the refusals: what a file of this format is."""
    extensions: tuple[str, ...] = ()
    """File extensions that say this format (lower case, with the dot)."""
    keys: frozenset[str] = frozenset()
    """Definition keys this format takes besides every format's (``encoding``, ``column_names``, ``separator``,
    ``glue``)."""
    check: Callable[[Task, dict[str, Source]], None] | None = None
    """What is refused before any split is read (both splits' headers, a binary file under a text name)."""
    claims: Callable[[Path], bool] | None = None
    """A file of another format's extension that is this format (SQuAD's nested JSON in a ``.json`` file)."""
    problem_type: str = ""
    """The one problem type its files hold (SQuAD: extractive QA); empty: any."""
    parts: bool = False
    """A split is a mapping of field to file (parallel files, one row a line), not one file."""


def table(columns: dict[str, Any], where: Source) -> datasets.Dataset:
    """A parsed file's columns as a table; values of mixed kinds in one column are refused in one line."""
    import datasets

    try:
        return datasets.Dataset.from_dict(columns)
    except Exception as err:  # noqa: BLE001 — pyarrow's words (ArrowInvalid, ArrowTypeError), on one line
        text = " ".join(str(err).split())[:200]
        raise DataError(f"{where}: a field holds values of different kinds (text, numbers, null, lists): {text}; "
                        "write each field one way") from None
