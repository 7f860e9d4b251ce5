"""One exception hierarchy for everything istar-tune reports to a user.

Every error says what is wrong, the value seen and how to fix it; the CLI prints the message on one line
and exits with code 2 (a traceback only with ``--debug``).
"""

from __future__ import annotations


class IstarTuneError(Exception):
    """Base class of every error istar-tune raises on purpose."""


class ConfigError(IstarTuneError, ValueError):
    """A configuration value or file is invalid. ``problems`` lists every problem found, not only the first."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class DataError(IstarTuneError):
    """A data set cannot be found or parsed."""


class ModelError(IstarTuneError):
    """A model cannot be resolved or loaded."""


class IsotropyError(IstarTuneError, ValueError):
    """An isotropy score is undefined for the input (too few points, NaN values, ...)."""


class TrainingError(IstarTuneError):
    """Training cannot go on (for example the loss became NaN)."""
