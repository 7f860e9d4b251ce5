"""The formats a task's files may be in, by name: the one place the reading path and a definition's checks look a
format up. A format of one's own is one module holding a :class:`~istar_tune.data.format.Format` and one
:func:`register` call."""

from __future__ import annotations

from pathlib import Path

from istar_tune.data.delimited import CSV, TSV
from istar_tune.data.format import Format
from istar_tune.data.glue import GLUE
from istar_tune.data.json_rows import JSON
from istar_tune.data.lines import LINES
from istar_tune.data.parquet import PARQUET
from istar_tune.data.ptb import PTB
from istar_tune.data.squad import SQUAD

FORMATS: dict[str, Format] = {}
DELIMITED = CSV.name
"""The format of a file given a ``separator`` (any extension)."""
PARALLEL = LINES.name
"""The format of splits given as mappings of field to file."""


def register(fmt: Format) -> Format:
    """Make ``fmt`` a format a definition may name (a name already taken is refused)."""
    if fmt.name in FORMATS and FORMATS[fmt.name] is not fmt:
        raise ValueError(f"format {fmt.name!r} is registered already: give yours another name")
    FORMATS[fmt.name] = fmt
    return fmt


def get(name: str) -> Format:
    return FORMATS[name]


def names() -> tuple[str, ...]:
    return tuple(FORMATS)


def from_extension(path: Path) -> str | None:
    """The format a file's extension says (one that claims the file first: SQuAD's JSON); ``None``: none does."""
    suffix = Path(path).suffix.lower()
    found = [fmt for fmt in FORMATS.values() if suffix in fmt.extensions]
    claiming = [fmt for fmt in found if fmt.claims is not None and fmt.claims(Path(path))]
    plain = [fmt for fmt in found if fmt.claims is None]
    chosen = claiming or plain
    return chosen[0].name if chosen else None


for _fmt in (CSV, TSV, JSON, PARQUET, LINES, GLUE, PTB, SQUAD):
    register(_fmt)
