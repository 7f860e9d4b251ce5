"""``scheduler.type: conformal``: conformal early stopping (split conformal prediction of a trial's final score from
its score so far; the idea of optunahub's ``ConformalPruner`` and of the ``surestop`` package, on the complete curves
a group's finished trials hold).

From epoch ``grace_period`` on, a trial stops after epoch t when its score so far plus the margin q_t is below the
best final score its group's finished trials reached. q_t is the ⌈(n + 1)(1 − α/R)⌉-th smallest of the n finished
trials' residuals (final score − score after epoch t), R = horizon − grace_period the epochs a stop can happen at;
with too few finished trials for that rank the margin is infinite and nothing stops. **What it promises**
(:data:`PROMISE`): for a trial whose curve is exchangeable with the finished ones (another configuration of the same
model × task × method, drawn as they were, in a random order), its score after epoch t plus q_t is an upper
prediction bound of its final score that holds with probability at least 1 − α/R at each rung (split conformal
prediction), so at least 1 − α at all R at once. **What it does not** (:data:`NOT_PROMISED`): that at most α of the
trials that would have beaten the threshold are stopped; a share conditional on the outcome is not what a marginal
bound controls, and curves that start low and finish high (late bloomers) are stopped far more often than α when
they are few among the finished ones. A group with few trials stops nothing (α = 0.1 over R = 2 epochs needs 19
finished). tests/search/schedulers/test_conformal.py simulates both sentences.

Pure Python, no Ray: a group's scheduler answers Tune's calls (``on_trial_result`` and the rest) with Tune's
decisions, and ``replay`` drives the same object on a grid's recorded curves.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from istar_tune.config import trial_epochs
from istar_tune.search.schedulers.scheduler import Rule, Scheduler

PROMISE = ("for a trial whose curve is exchangeable with its group's finished curves, its score after an epoch plus "
           "that epoch's margin bounds its final score from above with probability at least 1 − α/R at each of the R "
           "epochs a stop can happen at (at least 1 − α at all of them at once; split conformal prediction)")
"""What the rule guarantees, in the words the reference, the replay and the docs print."""
NOT_PROMISED = ("it does not promise that at most α of the trials that would have beaten the best finished score are "
                "stopped: trials that start low and finish high (late bloomers) are stopped far more often when they "
                "are rare among the finished curves")
"""What it does not guarantee, printed beside :data:`PROMISE`."""
STOP, CONTINUE = "STOP", "CONTINUE"
"""Tune's decisions (``ray.tune.schedulers.TrialScheduler``'s values)."""


def margin(residuals: list[float], alpha: float) -> float:
    """The split-conformal upper margin of ``residuals`` at level ``alpha``: the ⌈(n + 1)(1 − α)⌉-th smallest, or
    infinity where that rank exceeds n (too few to bound)."""
    return _ranked(sorted(residuals), alpha)


def _ranked(ordered: list[float], alpha: float) -> float:
    """:func:`margin` of residuals already in order."""
    rank = _rank(len(ordered), alpha)
    return ordered[rank - 1] if rank <= len(ordered) else math.inf


def _rank(n: int, alpha: float) -> int:
    return math.ceil((n + 1) * (1 - alpha) - 1e-9)  # a product that is a whole number in exact arithmetic stays one


def needed(alpha: float) -> int:
    """The fewest residuals whose margin at ``alpha`` is finite."""
    n = 1
    while _rank(n, alpha) > n:
        n += 1
    return n


class ConformalStopping:
    """One group's conformal early stopping (the module's rule), fed Tune's results."""

    def __init__(self, grace: int, horizon: int, alpha: float, metric: str = "objective", mode: str = "max"):
        self.grace, self.horizon, self.alpha = grace, horizon, alpha
        self.metric, self.sign = metric, 1.0 if mode == "max" else -1.0
        self.level = alpha / max(1, horizon - grace)
        """α over the epochs a stop can happen at."""
        self.scores: dict[str, dict[int, float]] = {}
        self.epochs: dict[str, int] = {}
        """A trial's epochs (:func:`~istar_tune.config.trial_epochs` of its configuration)."""
        self.residuals: dict[int, list[float]] = {}
        """Epoch t → the finished trials' final score − score after t, sorted."""
        self.best = -math.inf

    def margins(self) -> dict[int, float]:
        """Epoch → the margin a trial's score after it gets now."""
        return {t: _ranked(self.residuals.get(t, []), self.level) for t in range(self.grace, self.horizon)}

    def on_trial_add(self, tune_controller, trial) -> None:
        self.scores.setdefault(trial.trial_id, {})
        self.epochs[trial.trial_id] = trial_epochs(trial.config)

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        epoch, value = int(result["training_iteration"]), self.sign * float(result[self.metric])
        scores = self.scores.setdefault(trial.trial_id, {})
        scores[epoch] = value if math.isfinite(value) else -math.inf
        epochs = self.epochs.get(trial.trial_id) or self.epochs.setdefault(trial.trial_id, trial_epochs(trial.config))
        if epoch >= epochs:
            self._finished(scores, epoch)
            return CONTINUE
        if epoch < self.grace or epochs != self.horizon:  # the margins are of curves to the horizon
            return CONTINUE
        cut = _ranked(self.residuals.get(epoch, []), self.level)
        return STOP if scores[epoch] + cut < self.best else CONTINUE

    def _finished(self, scores: dict[int, float], last: int) -> None:
        """A trial's last result: its final score may raise the threshold, and a curve to the horizon calibrates."""
        final = scores[last]
        self.best = max(self.best, final)
        if math.isfinite(final) and last >= self.horizon:
            for epoch, value in scores.items():
                if epoch < last and math.isfinite(value):
                    bisect.insort(self.residuals.setdefault(epoch, []), final - value)

    def on_trial_complete(self, tune_controller, trial, result) -> None:
        """Its last result was seen by :meth:`on_trial_result`."""

    def on_trial_error(self, tune_controller, trial) -> None:
        """A failed trial finishes nothing: its curve calibrates nothing."""

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.scores.pop(trial.trial_id, None)
        self.epochs.pop(trial.trial_id, None)


def build_conformal(rule: Rule) -> ConformalStopping:
    return ConformalStopping(rule.grace, rule.horizon, rule.alpha, rule.metric, rule.mode)


CONFORMAL = Scheduler(name="conformal", summary="conformal early stopping: stop a trial whose score so far plus a "
                                                "margin fitted on its group's finished curves is below their best "
                                                "(the score plus the margin is an upper bound of its final score "
                                                "with probability ≥ 1 − α/R at each of R rungs, for a trial "
                                                "exchangeable with the finished ones)",
                      reads=("grace_period", "alpha"), build=build_conformal)
