from __future__ import annotations

from ray.tune.schedulers import ASHAScheduler

from istar_tune.search.schedulers.asha import ASHA
from istar_tune.search.schedulers.scheduler import Rule


def test_asha_is_rays_with_one_bracket_its_rungs_from_the_rule():
    scheduler = ASHA.build(Rule("asha", horizon=9, grace_period=1, reduction_factor=3))
    assert isinstance(scheduler, ASHAScheduler) and scheduler._time_attr == "training_iteration"
    assert [[rung for rung, _ in bracket._rungs] for bracket in scheduler._brackets] == [[9, 3, 1]]
    late = ASHA.build(Rule("asha", horizon=3, grace_period=7, reduction_factor=2))  # grace kept within the horizon
    assert [rung for rung, _ in late._brackets[0]._rungs] == [3]
