from __future__ import annotations

from types import SimpleNamespace

from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

from istar_tune.search.schedulers import Rule
from istar_tune.search.tune.scheduler import STOPPED_EARLY, GroupScheduler


class Trial(SimpleNamespace):
    __hash__ = object.__hash__


def trial(trial_id, task):
    return Trial(trial_id=trial_id, config={"model": "m", "task": task, "method": "istar"}, status="RUNNING")


def test_the_scheduler_stops_trials_only_against_their_own_group():
    rule = Rule("asha", horizon=3, grace_period=1, reduction_factor=2)
    scheduler = GroupScheduler({"m/a/istar": rule, "m/b/istar": rule})
    trials = [trial("a1", "a"), trial("a2", "a"), trial("b1", "b")]
    for t in trials:
        scheduler.on_trial_add(None, t)
    assert scheduler.on_trial_result(None, trials[0], {"training_iteration": 1, "objective": 0.9}) == "CONTINUE"
    assert scheduler.on_trial_result(None, trials[1], {"training_iteration": 1, "objective": 0.1}) == "STOP"
    assert "a2" in STOPPED_EARLY
    # group b's first trial is weak compared to group a, but alone in its group: it goes on
    assert scheduler.on_trial_result(None, trials[2], {"training_iteration": 1, "objective": 0.05}) == "CONTINUE"
    assert set(scheduler.schedulers) == {"m/a/istar", "m/b/istar"}


def test_each_group_has_its_own_rule_and_a_group_without_one_is_first_come_first_served(tmp_path):
    scheduler = GroupScheduler({"m/a/istar": Rule("asha", horizon=3), "m/b/istar": Rule("median", horizon=3),
                                "m/c/istar": Rule("none", horizon=3)})
    assert set(scheduler.rules) == {"m/a/istar", "m/b/istar"}
    for key, task in (("a", "a"), ("b", "b"), ("c", "c")):
        scheduler.on_trial_add(None, trial(key, task))
    assert scheduler.on_trial_result(None, trial("c", "c"), {"training_iteration": 1, "objective": 0.0}) == "CONTINUE"
    assert isinstance(scheduler.schedulers["m/a/istar"], ASHAScheduler)
    assert isinstance(scheduler.schedulers["m/b/istar"], MedianStoppingRule) and "m/c/istar" not in scheduler.schedulers
    assert scheduler.debug_string() == "GroupScheduler: asha, median in 2 groups"
    scheduler.save(str(tmp_path / "state.pkl"))
    restored = GroupScheduler()
    restored.restore(str(tmp_path / "state.pkl"))
    assert restored.rules == scheduler.rules and set(restored.schedulers) == {"m/a/istar", "m/b/istar"}


def test_a_trial_ray_would_pause_at_its_last_epoch_finishes_instead():
    """Ray's median rule pauses a trial it cannot judge yet while another waits; at its last epoch Tune would restart
    it later with nothing left to train: it goes on (and so ends), as the replay counts it."""
    scheduler = GroupScheduler({"m/a/istar": Rule("median", horizon=2, grace_period=1)})
    waiting = Trial(trial_id="w", config={"model": "m", "task": "a", "method": "istar", "epochs": 2},
                    status="PENDING")
    controller = SimpleNamespace(get_live_trials=lambda: [waiting], search_alg=None)
    first, second = (Trial(trial_id=name, config={"model": "m", "task": "a", "method": "istar", "epochs": epochs},
                           status="RUNNING") for name, epochs in (("x", 3), ("y", 1)))
    for t in (first, second, waiting):
        scheduler.on_trial_add(controller, t)
    assert scheduler.on_trial_result(controller, first, {"training_iteration": 1, "objective": 0.5}) == "PAUSE"
    assert scheduler.on_trial_result(controller, second, {"training_iteration": 1, "objective": 0.5}) == "CONTINUE"
