"""The progress lines (one per trial event, a resumed search's count going on) and each trial's last status as Tune
reports trials ending (what the summary counts when Tune cannot read its results back)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow.fs

from istar_tune.metrics import choosing_score, score
from istar_tune.search.tune.progress import ProgressPrinter

FULL_DISK = "OSError: [Errno 28] No space left on device"


def _trial(trial_id, search="s", epochs=2, error_file=None, folder=None):
    config = {"model": "tiny-bert", "task": "rte", "method": "istar", "epochs": epochs, "learning_rate": 1e-4,
              "lam": -1.0, "zeta": 0.2, "search": search}
    folder = str(folder or f"/nonexistent/{trial_id}")
    storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=folder,
                              trial_driver_staging_path=folder)
    return SimpleNamespace(trial_id=trial_id, config=config, last_result={}, error_file=error_file, num_failures=1,
                           get_error=lambda: None, storage=storage)


def test_the_printer_names_each_trials_configuration_when_it_starts_reports_and_ends():
    lines = []
    printer = ProgressPrinter(total=2, write=lines.append)
    trial = _trial("t1")
    printer.on_trial_start(0, [], trial)
    printer.on_trial_result(0, [], trial, {"epoch": 1, "accuracy": 0.625, "epoch_time_s": 12.0})
    trial.last_result = {"epoch": 2, "accuracy": 0.75}
    printer.on_trial_complete(0, [], trial)
    printer.on_trial_start(0, [], trial)  # retried after a failure: it goes on
    printer.on_trial_error(0, [], _trial("t2"))
    name = "tiny-bert/rte istar λ=-1 ζ=0.2 lr=1e-4 bs=32 ep=2 s42"
    assert lines == [f"  trial t1 started: {name}",
                     f"  trial t1 epoch 1/2: accuracy 0.6250 (12 s) — {name}",
                     f"[1/2] trial t1 done: accuracy 0.7500 — {name}",
                     f"  trial t1 started again: {name}",
                     f"[2/2] trial t2 FAILED: unknown error — {name}"]
    quiet = ProgressPrinter(total=ProgressPrinter.EPOCH_LINES_UP_TO + 1, write=lines.append)
    quiet.on_trial_result(0, [], trial, {"epoch": 1, "accuracy": 0.5})
    assert len(lines) == 5


def test_a_trial_that_held_data_out_is_said_done_with_the_held_out_value_that_chose_first():
    """The last epoch's dev value is not what chose: the held-out one at the scored epoch is, and the tables' dev
    column is the dev value at that epoch."""
    lines = []
    printer = ProgressPrinter(total=1, write=lines.append)
    trial = _trial("t1")
    trial.last_result = {"epoch": 3, "accuracy": 0.7603, "holdout_accuracy": 0.7649, "scored_epoch": 2,
                         "scored_accuracy": 0.7615, "scored_holdout_accuracy": 0.7649}
    printer.on_trial_complete(0, [], trial)
    assert lines[0].startswith("[1/1] trial t1 done: held-out accuracy 0.7649 (dev 0.7615) at epoch 2 — ")
    table_row = {"scored_accuracy": 0.7615, "accuracy": 0.7603, "scored_holdout_accuracy": 0.7649}
    assert (choosing_score(table_row, "accuracy"), score(table_row, "accuracy")) == (0.7649, 0.7615)


def test_a_resumed_searchs_count_goes_on_from_the_trials_that_ended_before_it():
    lines = []
    printer = ProgressPrinter(total=4, write=lines.append)
    ended, failed, waiting, retried = _trial("t1"), _trial("t2"), _trial("t3"), _trial("t4")
    ended.status, failed.status, waiting.status, retried.status = "TERMINATED", "ERROR", "PENDING", "PENDING"
    printer.on_step_begin(0, [ended, failed, waiting, retried])  # as Tune restored them: two had ended
    waiting.status, waiting.last_result = "TERMINATED", {"epoch": 2, "accuracy": 0.75}
    printer.on_step_begin(1, [ended, failed, waiting, retried])  # counted once
    printer.on_trial_complete(1, [], waiting)
    printer.on_trial_complete(2, [], retried)
    assert [line[:22] for line in lines] == ["[3/4] trial t3 done: a", "[4/4] trial t4 done: t"]
    fresh = ProgressPrinter(total=1, write=lines.append)
    fresh.on_step_begin(0, [])
    fresh.on_trial_complete(0, [], ended)
    assert lines[-1].startswith("[1/1] trial t1 done")


def test_trial_statuses_follow_tune_as_trials_end_and_whole_at_the_experiments_end():
    from types import SimpleNamespace

    from istar_tune.search.tune.progress import TrialStatuses

    a, b = SimpleNamespace(trial_id="a", status="ERROR"), SimpleNamespace(trial_id="b", status="RUNNING")
    statuses = TrialStatuses()
    statuses.on_trial_error(iteration=3, trials=[a, b], trial=a)
    assert statuses.statuses == {"a": "ERROR"}
    b.status = "TERMINATED"
    statuses.on_trial_complete(iteration=4, trials=[a, b], trial=b)
    restored = SimpleNamespace(trial_id="c", status="TERMINATED")  # ended in the run before a resume
    statuses.on_experiment_end(trials=[a, b, restored])
    assert statuses.statuses == {"a": "ERROR", "b": "TERMINATED", "c": "TERMINATED"}


def test_the_trials_tune_could_not_read_back_are_counted_as_its_callbacks_saw_them(tmp_path):
    """Tune fails building its results when a full disk cut a trial's error file short: the summary then reads the
    trials the experiment ended with, the one that hit the full disk and the one being retried both interrupted."""
    from istar_tune.search.outcome import SearchSummary, group_outcomes
    from istar_tune.search.plan import PlannedGroup
    from istar_tune.search.spaces.space import Group
    from istar_tune.search.tune.progress import TrialStatuses

    full, retried = _trial("t1"), _trial("t2")
    full.status, retried.status = "ERROR", "PENDING"
    full.error_file = str(tmp_path / "error.txt")
    (tmp_path / "error.txt").write_text(f"Traceback (most recent call last):\n{FULL_DISK}")
    retried.last_result = {"epoch": 1, "objective": 0.5}
    statuses = TrialStatuses()
    statuses.on_experiment_end(trials=[full, retried])
    planned = [PlannedGroup(group=Group("tiny-bert", "rte", "istar", {}), trials=4)]
    (outcome,) = group_outcomes(planned, statuses.results(), statuses.statuses, "s", stopped=True)
    assert {t.trial_id: t.status for t in outcome.trials} == {"t1": "interrupted", "t2": "interrupted"}
    summary = SearchSummary(name="s", storage_path="/runs", tracking_uri="sqlite:///m.db", groups=[outcome],
                            planned_trials=4, interrupted="systemic failure: no space left", systemic=True)
    assert summary.report().startswith("search s: 2 of 4 trials started, 0 finished, 0 stopped early, 0 failed, "
                                       "2 interrupted")
