"""A search's outcome from Tune's results: each trial's status, each group's best (the one best-trial rule), the
summary text and the exit code."""

from __future__ import annotations

from types import SimpleNamespace

from istar_tune.search.outcome import SearchSummary, every_trial_ended, exit_code, expected_trials, group_outcomes
from istar_tune.search.plan import PlannedGroup
from istar_tune.search.spaces.space import Group


def _result(trial_id, value, epochs, error=None, **config):
    config = {"model": "bert", "task": "rte", "method": "istar", "epochs": 3, "search": "s", **config}
    return SimpleNamespace(config=config, error=error, path=f"/runs/{trial_id}",
                           metrics={"trial_id": trial_id, "epoch": epochs, "objective": value, "timestamp": 1.0})


PLANNED = [PlannedGroup(group=Group("bert", "rte", "istar", {}), trials=5)]


def test_each_trial_gets_its_status_and_the_group_its_best():
    results = [_result("t3", 0.7, 3, learning_rate=2e-5), _result("t1", 0.7, 3, learning_rate=1e-5),
               _result("t2", 0.9, 1),
               _result("t4", 0.95, 3, error=RuntimeError("Traceback ...\nValueError: the loss became nan")),
               _result("t5", 0.99, 2), _result("other", 1.0, 3, search="another")]
    statuses = {"t5": "RUNNING"}
    (outcome,) = group_outcomes(PLANNED, results, statuses, "s")
    by_id = {t.trial_id: t for t in outcome.trials}
    assert set(by_id) == {"t1", "t2", "t3", "t4", "t5"}  # another search's trial is not this search's
    assert ([by_id[t].status for t in ("t1", "t2", "t3", "t4", "t5")] ==
            ["finished", "stopped_early", "finished", "failed", "interrupted"])
    assert by_id["t4"].error == "ValueError: the loss became nan"
    assert outcome.best.trial_id == "t2"  # failed and interrupted trials never win; a stopped one counts
    (tie,) = group_outcomes(PLANNED, [results[0], results[1]], {}, "s")
    assert tie.best.trial_id == "t1"  # ties go to the configuration first in tie_order, as in the tables


def test_the_summary_reports_counts_the_best_configuration_and_failures():
    results = [_result("t1", 0.7, 3, learning_rate=3e-5, lam=-1.0, zeta=0.2),
               _result("t2", None, 1, error=RuntimeError("OSError: disk full"))]
    groups = group_outcomes(PLANNED, results, {}, "s")
    summary = SearchSummary(name="s", storage_path="/runs", tracking_uri="sqlite:///m.db", groups=groups,
                            planned_trials=5)
    text = summary.report()
    assert text.startswith("search s: 2 trials, 1 finished, 0 stopped early, 1 failed")
    assert ("bert/rte/istar: best dev accuracy 0.7000 (no data held out: the dev set chose it) with "
            "learning_rate=3e-05") in text and "lam=-1.0" in text
    assert "FAILED bert/rte/istar trial t2: OSError: disk full" in text
    assert exit_code(summary) == 1
    summary.interrupted = "interrupted by a signal"
    assert exit_code(summary) == 130
    first, second = summary.report().splitlines()[:2]  # one count throughout, of the trials planned
    assert first.startswith("search s: 2 of 5 trials started, 1 finished, 0 stopped early, 1 failed")
    assert second.startswith("INTERRUPTED (interrupted by a signal): 3 of 5 trials did not finish")


def test_seeds_of_a_group_whose_source_scored_nothing_are_not_expected():
    source = PlannedGroup(group=Group("bert", "rte", "istar", {}), trials=2)
    seeds = PlannedGroup(group=Group("bert", "rte", "istar", {}), trials=3, after="s:bert/rte/istar")
    failed = group_outcomes([source], [_result("t1", None, 1, error=RuntimeError("x"))], {}, "s")
    assert expected_trials(["s"], {"s": [source, seeds]}, {"s": [*failed, *failed]}) == 2
    scored = group_outcomes([source], [_result("t1", 0.6, 3)], {}, "s")
    assert expected_trials(["s"], {"s": [source, seeds]}, {"s": [*scored, *scored]}) == 5
    assert every_trial_ended(["s"], {"s": [source, seeds]}, {"s": [*failed, *failed]})  # the seeds never ran
    assert not every_trial_ended(["s"], {"s": [source, seeds]}, {"s": [*scored, *scored]})  # 2 of 5


def test_the_disk_a_search_takes_is_measured_and_said_as_people_read_it(tmp_path):
    from istar_tune.search.outcome import disk_size, folder_bytes

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 1500)
    (tmp_path / "g").write_bytes(b"y" * 500)
    assert folder_bytes(str(tmp_path)) == 2000 and folder_bytes(str(tmp_path / "nowhere")) is None
    assert [disk_size(n) for n in (12, 2000, 187_000_000, 1_340_000_000)] == ["12 B", "2 kB", "187 MB", "1.34 GB"]


def test_a_rehearsal_says_the_makespan_its_wall_time_stands_for():
    groups = group_outcomes(PLANNED, [_result("t1", 0.7, 3)], {}, "s")
    summary = SearchSummary(name="s", storage_path="/runs", tracking_uri="sqlite:///m.db", groups=groups,
                            phases_s={"fit": 36.0}, time_factor=0.004)
    assert ("rehearsal: Tune ran the experiment's trials in 36.0 s at time factor 0.004: a makespan of about 2.5 "
            "hours on the rehearsed cluster") in summary.report()
    summary.time_factor = 0.1
    assert "a makespan of about 6 minutes" in summary.report()
    summary.time_factor = 0.0  # trials that trained: their wall time is the makespan, said by no extra line
    assert "rehearsal" not in summary.report()


def test_with_held_out_data_the_summary_chooses_on_it_and_shows_the_dev_value_beside():
    """t1 is best on the dev set (0.90), t2 on the held-out examples that chose (its objective): t2 is the best,
    said as its held-out value with its dev value beside it; a shared trial's configurations keep their own."""
    held = [_result("t1", 0.60, 3, learning_rate=1e-5), _result("t2", 0.75, 3, learning_rate=2e-5)]
    held[0].metrics["dev_objective"], held[1].metrics["dev_objective"] = 0.90, 0.70
    (outcome,) = group_outcomes(PLANNED, held, {}, "s")
    assert outcome.best.trial_id == "t2" and outcome.best.dev_value == 0.70
    text = SearchSummary(name="s", storage_path="/runs", tracking_uri="sqlite:///m.db", groups=[outcome]).report()
    assert "bert/rte/istar: best held-out accuracy 0.7500 (dev 0.7000, which chose nothing) with" in text
    shared = _result("t3", 0.8, 3, learning_rate=3e-5, completes_epochs=[1, 3])
    shared.metrics.update({"objective_at_epoch_1": 0.65, "dev_objective_at_epoch_1": 0.95, "dev_objective": 0.6})
    (both,) = group_outcomes(PLANNED, [shared], {}, "s")
    assert {t.config["epochs"]: (t.value, t.dev_value) for t in both.trials} == {1: (0.65, 0.95), 3: (0.8, 0.6)}
