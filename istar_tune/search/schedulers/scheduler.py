"""What an early-stopping scheduler is: the value of ``scheduler.type`` that chooses it, the ``scheduler.*`` settings
it reads, and how it builds the Tune scheduler of one group (:class:`Rule`: its setting and the group's horizon)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

REPLAYED: dict[str, tuple[float, ...]] = {"grace_period": (1, 2), "reduction_factor": (2, 3, 4),
                                          "alpha": (0.1, 0.2)}
"""The values ``replay`` tries of each ``scheduler.*`` setting a scheduler reads."""


@dataclass(frozen=True)
class Rule:
    """One group's early stopping: the scheduler's name, its settings, and the epochs the group's longest trial
    reports (its horizon)."""

    scheduler: str
    horizon: int
    grace_period: int = 1
    reduction_factor: float = 3.0
    metric: str = "objective"
    mode: str = "max"
    alpha: float = 0.1
    """conformal: the chance bound (:mod:`istar_tune.search.schedulers.conformal`)."""

    @property
    def grace(self) -> int:
        """The grace period within the horizon."""
        return max(1, min(self.grace_period, self.horizon))


@dataclass(frozen=True)
class Scheduler:
    name: str
    """``scheduler.type``'s value that chooses it."""
    summary: str
    """One line for the reference and the dry run."""
    reads: tuple[str, ...] = ()
    """The ``scheduler.*`` settings it reads (``grace_period``, ``reduction_factor``)."""
    build: Callable[[Rule], Any] | None = None
    """One group's Tune scheduler (``ray.tune.schedulers.TrialScheduler``), its time the trial's epochs (``None``:
    it never stops a trial)."""
    pauses: bool = False
    """It may pause a trial and resume it later from its checkpoint (a trial needs ``settings.checkpoint`` other
    than ``none``)."""
    replay_values: Mapping[str, tuple[float, ...]] | None = None
    """Its own values for ``replay`` to try of a setting it reads, where :data:`REPLAYED`'s do not suit it."""

    def replayed(self, horizon: int) -> list[dict[str, float]]:
        """The settings ``replay`` tries it with over a grid of ``horizon`` epochs: of the settings it reads, every
        combination of its :attr:`replay_values`, else :data:`REPLAYED`'s (a grace period below the horizon; none
        where no grace period fits below it)."""
        grid: list[dict[str, float]] = [{}]
        for key in self.reads:
            tried = (self.replay_values or {}).get(key, REPLAYED.get(key, ()))
            values = [v for v in tried if key != "grace_period" or v < horizon]
            if key == "grace_period" and not values:
                return []  # its first rung would lie at the grid's last epoch: it could stop nothing
            grid = [{**found, key: value} for found in grid for value in values] if values else grid
        return grid

    def describe(self, grace_period: int, reduction_factor: float, alpha: float = 0.1) -> str:
        """``asha (grace 1, η 2)``: the name and the settings it reads."""
        said = {"grace_period": f"grace {grace_period}", "reduction_factor": f"η {reduction_factor:g}",
                "alpha": f"α {alpha:g}"}
        settings = ", ".join(said[key] for key in self.reads if key in said)
        return f"{self.name} ({settings})" if settings else self.name
