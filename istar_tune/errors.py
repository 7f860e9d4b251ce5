"""One exception hierarchy for everything istar-tune reports to a user.

Every error says what is wrong, the value seen and how to fix it; the CLI prints the message on one line
and exits with code 2 (a traceback only with ``--debug``).
"""

from __future__ import annotations


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


class TrainingError(IstarTuneError):
    """Training cannot go on (for example the loss became NaN)."""
