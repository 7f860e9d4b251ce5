from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from istar_tune.search.tune.scheduler import GroupScheduler

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"


def test_the_scheduler_stops_trials_only_against_their_own_group():
    scheduler = GroupScheduler({"m/a/istar": 3, "m/b/istar": 3}, grace_period=1, reduction_factor=2)

    def trial(trial_id, task):
        return SimpleNamespace(trial_id=trial_id, config={"model": "m", "task": task, "method": "istar"})

    trials = [trial("a1", "a"), trial("a2", "a"), trial("b1", "b")]
    for t in trials:
        scheduler.on_trial_add(None, t)
    assert scheduler.on_trial_result(None, trials[0], {"training_iteration": 1, "objective": 0.9}) == "CONTINUE"
    assert scheduler.on_trial_result(None, trials[1], {"training_iteration": 1, "objective": 0.1}) == "STOP"
    # group b's first trial is weak compared to group a, but alone in its group: it goes on
    assert scheduler.on_trial_result(None, trials[2], {"training_iteration": 1, "objective": 0.05}) == "CONTINUE"
    assert set(scheduler.schedulers) == {"m/a/istar", "m/b/istar"}
