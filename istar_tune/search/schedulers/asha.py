"""``scheduler.type: asha``: asynchronous successive halving (Ray's ``ASHAScheduler``, one bracket): at rungs of
``grace_period · reduction_factor^k`` epochs a trial goes on only if its objective is in the top
1/``reduction_factor`` of the trials its group recorded there before it."""

from __future__ import annotations

from typing import Any

from istar_tune.search.schedulers.scheduler import Rule, Scheduler


def build_asha(rule: Rule) -> Any:
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", metric=rule.metric, mode=rule.mode, max_t=rule.horizon,
                         grace_period=rule.grace, reduction_factor=rule.reduction_factor)


ASHA = Scheduler(name="asha", summary="asynchronous successive halving: stop a trial outside the top "
                                      "1/reduction_factor at each rung (grace_period · reduction_factor^k epochs)",
                 reads=("grace_period", "reduction_factor"), build=build_asha)
