"""``scheduler.type: median``: Ray's ``MedianStoppingRule`` with a hard stop: from epoch ``grace_period`` on, a
trial whose best objective so far is below the median of its group's other trials' mean objectives up to that epoch
stops; with fewer than :data:`MIN_SAMPLES` such trials it pauses while others wait for a worker (Tune saves it and
resumes it later from its checkpoint), else it goes on."""

from __future__ import annotations

from typing import Any

from istar_tune.search.schedulers.scheduler import Rule, Scheduler

MIN_SAMPLES = 3
"""Trials that must have reached an epoch before a trial is judged there (Ray's default, as ``replay`` models it)."""


def build_median(rule: Rule) -> Any:
    from ray.tune.schedulers import MedianStoppingRule

    return MedianStoppingRule(time_attr="training_iteration", metric=rule.metric, mode=rule.mode,
                              grace_period=rule.grace, min_samples_required=MIN_SAMPLES, hard_stop=True)


MEDIAN = Scheduler(name="median", summary="median stopping: stop a trial whose best is below the median of the "
                                          "others' means so far (from grace_period epochs on)",
                   reads=("grace_period",), build=build_median, pauses=True)
