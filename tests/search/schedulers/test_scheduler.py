from __future__ import annotations

from istar_tune.search.schedulers.scheduler import Rule, Scheduler


def test_a_rule_keeps_its_grace_period_within_the_horizon():
    assert Rule("asha", horizon=3, grace_period=5).grace == 3 and Rule("asha", horizon=9, grace_period=2).grace == 2


def test_a_scheduler_describes_itself_with_the_settings_it_reads():
    both = Scheduler("asha", "s", reads=("grace_period", "reduction_factor"))
    assert both.describe(1, 2.0) == "asha (grace 1, η 2)"
    assert Scheduler("median", "s", reads=("grace_period",)).describe(2, 3.0) == "median (grace 2)"
    assert Scheduler("none", "s").describe(1, 3.0) == "none"


def test_the_replayed_settings_are_its_own_or_the_shared_values_and_none_where_no_rung_fits():
    from istar_tune.search.schedulers.asha import ASHA
    from istar_tune.search.schedulers.hyperband import HYPERBAND
    from istar_tune.search.schedulers.median import MEDIAN

    assert ASHA.replayed(3) == [{"grace_period": g, "reduction_factor": eta} for g in (1, 2) for eta in (2, 3, 4)]
    assert ASHA.replayed(2) == [{"grace_period": 1, "reduction_factor": eta} for eta in (2, 3, 4)]
    assert HYPERBAND.replayed(5) == [{"grace_period": 1, "reduction_factor": 2}, {"grace_period": 1,
                                                                                 "reduction_factor": 3}]
    assert MEDIAN.replayed(1) == [] and ASHA.replayed(1) == []  # a one-epoch grid: nothing to stop
