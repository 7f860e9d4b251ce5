"""``scheduler.type: hyperband``: asynchronous Hyperband (Ray's ``AsyncHyperBandScheduler``): ASHA in several
brackets, each trial drawn into one (a later bracket's first rung lies later, so its trials are judged after more
epochs); as many brackets as the group's horizon holds rungs for. ``replay`` drives this same object."""

from __future__ import annotations

import math
from typing import Any

from istar_tune.search.schedulers.scheduler import Rule, Scheduler


def brackets(horizon: int, grace: int, reduction_factor: float) -> int:
    """The brackets asynchronous Hyperband runs: one per rung up to the horizon."""
    return max(1, int(math.log(horizon / grace) / math.log(reduction_factor)) + 1)


def build_hyperband(rule: Rule) -> Any:
    from ray.tune.schedulers import AsyncHyperBandScheduler

    return AsyncHyperBandScheduler(time_attr="training_iteration", metric=rule.metric, mode=rule.mode,
                                   max_t=rule.horizon, grace_period=rule.grace,
                                   reduction_factor=rule.reduction_factor,
                                   brackets=brackets(rule.horizon, rule.grace, rule.reduction_factor))


HYPERBAND = Scheduler(name="hyperband", summary="asynchronous Hyperband: successive halving in every bracket the "
                                                "epochs hold, each trial drawn into one",
                      reads=("grace_period", "reduction_factor"), build=build_hyperband,
                      replay_values={"grace_period": (1,), "reduction_factor": (2, 3)})
"""Replayed from grace 1 alone (a later bracket's rungs already start later) with η 2 and 3 (at η 4 a grid of up to
15 epochs holds one bracket: ASHA's)."""
