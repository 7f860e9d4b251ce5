"""What a search backend is: the value of ``search.algorithm`` that chooses it, the domain kinds it searches, whether
it hands out every configuration of a space or samples a budget of trials from a study that sees their results, and
(a sampling backend) the Optuna sampler it samples with."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backend:
    name: str
    """``search.algorithm``'s value that chooses it."""
    kinds: tuple[str, ...]
    """The domain kinds it searches (a constant is searched by every backend)."""
    enumerates: bool
    """True: every configuration of the space's grid domains, ``num_samples`` times (each other domain drawn once a
    configuration); False: ``num_samples`` trials a group, suggested by a study that is told each trial's result."""
    summary: str
    """One line for the reference and the dry run."""
    sampler: Callable[[int | None], Any] | None = None
    """A sampling backend's Optuna sampler, seeded with ``search.seed``."""

    def trials(self, grid_sizes: Iterable[int], num_samples: int) -> int:
        """Trials of a group whose domains contribute ``grid_sizes`` grid points each."""
        return math.prod(grid_sizes) * num_samples if self.enumerates else num_samples

    def searches(self, kind: str) -> bool:
        """Whether it searches a domain of ``kind`` (a constant: every backend)."""
        return kind == "constant" or kind in self.kinds


def listed(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "none"
