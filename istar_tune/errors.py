"""One exception hierarchy for everything istar-tune reports to a user.

Every error says what is wrong, the value seen and how to fix it; the CLI prints the message on one line
and exits with code 2 (a traceback only with ``--debug``).
"""

from __future__ import annotations

import re


class IstarTuneError(Exception):
    """Base class of every error istar-tune raises on purpose."""


class ConfigError(IstarTuneError, ValueError):
    """A configuration value or file is invalid. ``problems`` lists every problem found, not only the first."""

    SHOWN = 20
    """Problems the message shows (all stay in ``problems``): one readable line, however bad the input."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        shown = [p if len(p) <= 1000 else p[:1000] + "…" for p in self.problems[:self.SHOWN]]
        more = len(self.problems) - len(shown)
        super().__init__("; ".join(shown) + (f"; and {more} more problems" if more > 0 else ""))


class DataError(IstarTuneError):
    """A data set cannot be found or parsed."""


class ModelError(IstarTuneError):
    """A model cannot be resolved or loaded."""


class IsotropyError(IstarTuneError, ValueError):
    """An isotropy score is undefined for the input (too few points, NaN values, ...)."""


class ClusterError(IstarTuneError):
    """A Ray instance cannot be started or joined (a local one that did not start in time, under load)."""


class TrainingError(IstarTuneError):
    """Training cannot go on (for example the loss became NaN)."""


KEYS_SHOWN = 10
"""Unknown keys one problem names (the rest are counted)."""


def unknown_keys(given, known, what: str = "key") -> tuple[str, str]:
    """An unknown-keys problem as ``(where, text)``: the keys (the first :data:`KEYS_SHOWN`, the rest counted), a
    close known key for each that looks like a typo, and the known ones, once however many were given."""
    import difflib

    given, known = [str(k) for k in given], sorted(str(k) for k in known)
    shown = ", ".join(given[:KEYS_SHOWN]) + (f" and {len(given) - KEYS_SHOWN:,} more" if len(given) > KEYS_SHOWN
                                               else "")
    close = {k: difflib.get_close_matches(k, known, n=1, cutoff=0.75) for k in given[:KEYS_SHOWN]}
    meant = "; ".join(f"{k}: did you mean {m[0]}?" for k, m in close.items() if m)
    plural = "s" if len(given) > 1 else ""
    return shown, f"unknown {what}{plural}{' (' + meant + ')' if meant else ''} (known: {', '.join(known)})"


def repeated(values) -> list:
    """The values given more than once in ``values``, sorted: what an error about a repeated name names."""
    values = list(values)
    return sorted({v for v in values if values.count(v) > 1})


STORAGE_FAILURES = (
    (re.compile(r"No space left on device|Errno 28|ENOSPC|Disk quota exceeded|Errno 122|database or disk is full"),
     "no space left on the storage device"),
    (re.compile(r"Read-only file system|Errno 30|EROFS|attempt to write a readonly database"),
     "the storage device is read-only"),
    (re.compile(r"database disk image is malformed|file is not a database|no such table: (?:runs|experiments|"
                r"metrics|params|tags|latest_metrics|alembic_version)\b"),
     "the MLflow store's file is damaged (move it aside and start a new store, or restore it from a backup)"),
)
"""Error texts of a full or read-only storage device, with the cause in words: no retry and no other configuration
mends them (the search stops for them, the MLflow run writer gives up on them at once)."""


def storage_failure(error_text: str) -> str:
    """The cause, in words, when ``error_text`` is a :data:`STORAGE_FAILURES` error; empty otherwise."""
    return next((cause for pattern, cause in STORAGE_FAILURES if pattern.search(error_text or "")), "")
