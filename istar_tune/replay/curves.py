"""A finished grid as learning curves: what each configuration's trial reported after each epoch, and the rule that
chooses among configurations (the tables' rule, :func:`istar_tune.metrics.best_scored`). Pure data: no MLflow, no Ray.

A curve's ``values`` are what the trial reported to its scheduler after each epoch: its score so far (the task metric
after that epoch, or with ``holdout`` the best held-out metric so far, the scored epoch being the first that reached
it). A scheduler that stops a trial after epoch t leaves that model: its score is ``values[t - 1]`` and, with held-out
data, its dev score ``dev[t - 1]`` (the dev metric at the epoch the held-out data chose)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from istar_tune.metrics import best_scored


@dataclass(frozen=True)
class Curve:
    """One configuration of a grid and what its trial reported, epoch by epoch."""

    config: Mapping[str, Any]
    """Its hyperparameters, ``method`` and ``epochs`` included."""
    values: tuple[float, ...]
    """The score after each epoch, as the scheduler saw it; shorter than ``epochs`` when the trial failed."""
    dev: tuple[float, ...] | None = None
    """With held-out data: the dev score of the model each epoch leaves (its scored epoch's dev metric)."""
    failed: bool = False
    """The trial failed (a NaN loss, an error) after ``len(values)`` epochs: never chosen."""
    epoch_seconds: float = 1.0
    """One epoch's modelled seconds (the cost model): the order asynchronous workers see results in, GPU-hours."""

    @property
    def epochs(self) -> int:
        return int(self.config["epochs"])

    @property
    def trained_epochs(self) -> int:
        """Epochs its trial trains when let run: all of them, or up to the one it failed in."""
        return min(self.epochs, len(self.values) + self.failed)

    def reported(self, epoch: int) -> bool:
        """Whether the trial reported a result after ``epoch`` (a failed trial stops reporting)."""
        return epoch <= len(self.values)

    def score(self, epoch: int | None = None) -> float:
        """The score of the model left after ``epoch`` (the last by default); NaN where none was reported."""
        epoch = self.epochs if epoch is None else epoch
        return self.values[epoch - 1] if self.reported(epoch) else math.nan

    def dev_score(self, epoch: int | None = None) -> float:
        epoch = self.epochs if epoch is None else epoch
        if self.dev is None or not self.reported(epoch):
            return math.nan
        return self.dev[epoch - 1]

    def at(self, epoch: int) -> dict[str, Any]:
        """The configuration a run stopped after ``epoch`` trained: this one with ``epochs`` = ``epoch``."""
        return {**self.config, "epochs": epoch}


@dataclass(frozen=True)
class Choice:
    """What a replayed search chose and what it cost."""

    chosen: tuple[int, int] | None
    """The chosen curve's index and the epoch its trial ended at (its own ``epochs``, or where a scheduler stopped
    it); ``None``: every trial it ran failed."""
    epochs_trained: int
    seconds: float
    """Modelled seconds of every epoch trained (the cost model's GPU-seconds on one GPU a trial)."""


@dataclass
class Unit:
    """The configurations one replay chooses among: a model × task × method group (or every method of a model ×
    task), with the grid's own choice and cost."""

    model: str
    task: str
    method: str
    """A method, or ``all`` (the methods compared against each other)."""
    curves: list[Curve]
    grid_epochs: int
    """Epochs the grid trained (configurations that shared an epoch prefix counted once)."""
    grid_seconds: float
    noise: float | None = None
    """The seed noise of the grid's choice (sample standard deviation of its score over a seeds stage's runs);
    ``None``: unknown."""
    best: tuple[int, int] | None = field(default=None, init=False)
    """The grid's choice: every configuration trained to its own epochs."""

    def __post_init__(self) -> None:
        self.best = choose(self.curves, [(i, c.epochs) for i, c in enumerate(self.curves)])

    def model_of(self, chosen: tuple[int, int]) -> dict[str, Any]:
        """The configuration whose model a trial ending at ``chosen`` left."""
        return self.curves[chosen[0]].at(chosen[1])

    def score_of(self, chosen: tuple[int, int] | None) -> float:
        return self.curves[chosen[0]].score(chosen[1]) if chosen else math.nan

    def dev_score_of(self, chosen: tuple[int, int] | None) -> float:
        return self.curves[chosen[0]].dev_score(chosen[1]) if chosen else math.nan

    def is_best(self, chosen: tuple[int, int] | None) -> bool:
        return chosen is not None and self.best is not None and (
            self.model_of(chosen) == self.model_of(self.best))


def choose(curves: Sequence[Curve], ended: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """The (curve index, epoch) among ``ended`` (each trial's index and the epoch it ended at) whose model scores
    highest: :func:`~istar_tune.metrics.best_scored`, the tables' rule, on the configuration each trial left (ties
    to fewer epochs, failed trials and NaN scores never win; ``None`` when nothing scored)."""
    return best_scored(ended, lambda end: curves[end[0]].at(end[1]), lambda end: curves[end[0]].score(end[1]))


def arms(curves: Sequence[Curve]) -> dict[int, list[int]]:
    """The curves an early-stopping scheduler runs, each with the epoch counts it completes on its way. Where
    configurations that differ only in ``epochs`` record the same numbers epoch by epoch (a shorter run is the start
    of the longest: shared prefixes), only the longest runs, its epochs the scheduler's budget, and reaching epoch k
    completes the k-epoch configuration (as a shared trial does); else every curve runs, completing itself."""
    families: dict[tuple, list[int]] = {}
    for index, curve in enumerate(curves):
        families.setdefault(tuple(sorted((k, str(v)) for k, v in curve.config.items() if k != "epochs")),
                            []).append(index)
    found: dict[int, list[int]] = {}
    for members in families.values():
        top = curves[max(members, key=lambda i: curves[i].epochs)]
        if all(_prefix(curves[i], top) for i in members):
            found[max(members, key=lambda i: curves[i].epochs)] = sorted({curves[i].epochs for i in members})
        else:
            found.update({i: [curves[i].epochs] for i in members})
    return dict(sorted(found.items()))


def _prefix(curve: Curve, longest: Curve) -> bool:
    """``curve`` is the start of ``longest``, number for number (neither failed)."""
    k = curve.epochs
    return (not curve.failed and not longest.failed and len(curve.values) == k and curve.values == longest.values[:k]
            and curve.dev == (longest.dev[:k] if longest.dev is not None else None))
