from __future__ import annotations

from istar_tune.search.schedulers.scheduler import Rule, Scheduler


def test_a_rule_keeps_its_grace_period_within_the_horizon():
    assert Rule("asha", horizon=3, grace_period=5).grace == 3 and Rule("asha", horizon=9, grace_period=2).grace == 2


def test_a_scheduler_describes_itself_with_the_settings_it_reads():
    both = Scheduler("asha", "s", reads=("grace_period", "reduction_factor"))
    assert both.describe(1, 2.0) == "asha (grace 1, η 2)"
    assert Scheduler("median", "s", reads=("grace_period",)).describe(2, 3.0) == "median (grace 2)"
    assert Scheduler("none", "s").describe(1, 3.0) == "none"
