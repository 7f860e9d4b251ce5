"""The Tune callbacks: the MLflow logger gives every trial of its search one child run with its params, per-epoch
metrics and final status; the printer writes one line per event."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow.fs

from istar_tune import tracking
from istar_tune.metrics import CLOSING_ONLY
from istar_tune.search.tune.callbacks import LOST, MlflowTrialLogger, reported_epochs
from istar_tune.search.tune.progress import ProgressPrinter
from istar_tune.search.tune.reporter import RESTORED_RECORDS
from istar_tune.trial_config import SHARED_EPOCHS_KEY

FULL_DISK = "OSError: [Errno 28] No space left on device"


def _trial(trial_id, search="s", epochs=2, error_file=None, folder=None):
    config = {"model": "tiny-bert", "task": "rte", "method": "istar", "epochs": epochs, "learning_rate": 1e-4,
              "lam": -1.0, "zeta": 0.2, "search": search}
    folder = str(folder or f"/nonexistent/{trial_id}")  # where Ray keeps the trial's result file
    storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=folder,
                              trial_driver_staging_path=folder)
    return SimpleNamespace(trial_id=trial_id, config=config, last_result={}, error_file=error_file, num_failures=1,
                           get_error=lambda: None, storage=storage)


def test_each_trial_of_the_search_gets_one_run_with_its_records_and_status(mlflow_store, tmp_path):
    uri, client, experiment = mlflow_store
    parent = tracking.parent_run(client, experiment, "s", {})
    logger = MlflowTrialLogger(uri, "s", parent, experiment, {"istar_tune.stage": "search"}, threads=2)
    finished, stopped, failed, open_, other = (_trial("t1"), _trial("t2", epochs=3), _trial("t3"), _trial("t4"),
                                               _trial("x1", search="another"))
    error = tmp_path / "error.txt"
    error.write_text("Traceback (most recent call last):\nRuntimeError: CUDA out of memory")
    failed.error_file = str(error)
    for trial in (finished, stopped, failed, open_, other):
        logger.on_trial_start(0, [], trial)
    for trial in (finished, stopped):
        for epoch in (1, 2):
            trial.last_result = {"epoch": epoch, "accuracy": 0.5 + epoch / 10, "node_id": "n1"}
            logger.on_trial_result(0, [], trial, trial.last_result)
        logger.on_trial_complete(0, [], trial)
    logger.on_trial_error(0, [], failed)
    logger.interrupt("interrupted by a signal")
    assert logger.close(timeout=60)
    runs = _trial_runs(client, experiment)
    assert set(runs) == {"t1", "t2", "t3", "t4"}  # the other search's trial is not logged here
    status = _statuses(runs)
    assert status == {"t1": ("finished", "FINISHED"), "t2": ("stopped_early", "FINISHED"),
                      "t3": ("failed", "FAILED"), "t4": ("interrupted", "KILLED")}
    assert runs["t3"].data.tags[tracking.TAG_ERROR] == "RuntimeError: CUDA out of memory"
    assert runs["t2"].data.tags["istar_tune.stopped_after_epoch"] == "2"
    assert runs["t1"].data.params["learning_rate"] == "0.0001" and runs["t1"].data.tags[tracking.TAG_NODE] == "n1"
    history = client.get_metric_history(runs["t1"].info.run_id, "accuracy")
    assert [(m.step, round(m.value, 3)) for m in history] == [(1, 0.6), (2, 0.7)]
    assert runs["t1"].data.tags[tracking.TAG_SEARCH_RUN] == parent


def test_a_resumed_experiment_ends_the_runs_of_trials_tune_restored_as_ended(mlflow_store):
    uri, client, experiment = mlflow_store
    killed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    done, failed, running = _trial("t1"), _trial("t2"), _trial("t3")
    for trial in (done, failed, running):
        killed.on_trial_start(0, [], trial)
    assert killed.writer.flush(timeout=30)  # the driver dies before the ends are written
    done.status, failed.status, running.status = "TERMINATED", "ERROR", "PENDING"
    done.last_result = {"epoch": 2, "accuracy": 0.75}
    resumed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    resumed.on_step_begin(0, [done, failed, running])
    resumed.on_step_begin(1, [done, failed, running])  # once only
    assert resumed.close(timeout=30)
    runs = {r.data.tags[tracking.TAG_TRIAL_ID]: r for r in tracking.find_runs(client, experiment)}
    assert ({k: r.data.tags[tracking.TAG_STATUS] for k, r in runs.items()} ==
            {"t1": "finished", "t2": "failed", "t3": "running"})
    assert runs["t1"].data.metrics["accuracy"] == 0.75 and runs["t1"].info.status == "FINISHED"


def _trial_runs(client, experiment) -> dict:
    """The experiment's trial runs by trial id."""
    return {r.data.tags[tracking.TAG_TRIAL_ID]: r
            for r in tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})}


def _statuses(runs: dict) -> dict:
    """Each run's (istar-tune status tag, MLflow status)."""
    return {k: (r.data.tags[tracking.TAG_STATUS], r.info.status) for k, r in runs.items()}


def _shared_trial(trial_id, counts=(1, 2, 3)):
    trial = _trial(trial_id, epochs=max(counts))
    trial.config = {**trial.config, "method": "base", "lam": None, SHARED_EPOCHS_KEY: list(counts)}
    return trial


def test_a_shared_trial_gives_each_configuration_its_run_ended_where_its_epochs_end(mlflow_store):
    """Completed, stopped by ASHA at epoch 2 (the 3-epoch configuration only reached 2), failed in epoch 2, and
    interrupted in epoch 3 of shared trials of epochs {1, 2, 3}."""
    uri, client, experiment = mlflow_store
    parent = tracking.parent_run(client, experiment, "s", {})
    logger = MlflowTrialLogger(uri, "s", parent, experiment, {}, threads=2)
    done, stopped, failed, open_ = (_shared_trial(t) for t in ("a", "b", "c", "d"))
    for trial, reached in ((done, 3), (stopped, 2), (failed, 1), (open_, 2)):
        logger.on_trial_start(0, [], trial)
        for epoch in range(1, reached + 1):
            trial.last_result = {"epoch": epoch, "accuracy": 0.5 + epoch / 10, "node_id": "n1",
                                 "eval_isoscore_star": 0.1 * epoch, "objective_at_epoch_1": 0.6,
                                 **({CLOSING_ONLY: "eval_isoscore_star,eval_zeta"} if epoch < 3 else {})}
            logger.on_trial_result(0, [], trial, trial.last_result)
    for trial in (done, stopped):
        logger.on_trial_complete(0, [], trial)
    logger.on_trial_error(0, [], failed)
    logger.interrupt("interrupted by a signal")
    assert logger.close(timeout=60)
    runs = _trial_runs(client, experiment)
    status = {k: r.data.tags[tracking.TAG_STATUS] for k, r in runs.items()}
    assert status == {"a-e1": "finished", "a-e2": "finished", "a-e3": "finished",
                      "b-e1": "finished", "b-e2": "finished", "b-e3": "stopped_early",
                      "c-e1": "finished", "c-e2": "failed", "c-e3": "failed",
                      "d-e1": "finished", "d-e2": "finished", "d-e3": "interrupted"}
    assert all(r.data.tags[tracking.TAG_TRAINED_BY] == k[0] for k, r in runs.items())
    assert ({k: r.data.params["epochs"] for k, r in runs.items() if k.startswith("a")} ==
            {"a-e1": "1", "a-e2": "2", "a-e3": "3"})
    assert runs["b-e3"].data.tags["istar_tune.stopped_after_epoch"] == "2"
    for epochs in (1, 2, 3):
        run_id = runs[f"a-e{epochs}"].info.run_id
        steps = [m.step for m in client.get_metric_history(run_id, "accuracy")]
        assert steps == list(range(1, epochs + 1))  # its own epochs only
        # the eval IsoScore* measured for a shorter configuration is left out of a longer one's epoch
        assert [m.step for m in client.get_metric_history(run_id, "eval_isoscore_star")] == [epochs]
        assert "objective_at_epoch_1" not in runs[f"a-e{epochs}"].data.metrics


def _resumed_after_a_kill(mlflow_store, trial) -> MlflowTrialLogger:
    """A first driver that started ``trial`` and died before writing more (its runs exist, empty), and the resumed
    driver's logger, Tune's restored state knowing of the trial's epoch 1."""
    uri, client, experiment = mlflow_store
    parent = tracking.parent_run(client, experiment, "s", {})
    first = MlflowTrialLogger(uri, "s", parent, experiment, {}, threads=2)
    first.on_trial_start(0, [], trial)
    assert first.close(timeout=60)  # the runs exist, nothing else was written: the driver is gone
    trial.last_result = {"epoch": 1}
    return MlflowTrialLogger(uri, "s", parent, experiment, {}, threads=2)


def test_a_resumed_trial_writes_the_epochs_a_killed_driver_never_wrote(mlflow_store):
    """The driver died after a shared trial of epochs {1, 2} reported epoch 1 and before that epoch reached MLflow; the
    resumed trial's first report carries epoch 1 again, so both configurations get it and the 1-epoch one ends."""
    _, client, experiment = mlflow_store
    trial = _shared_trial("k", counts=(1, 2))
    second = _resumed_after_a_kill(mlflow_store, trial)
    record = {"epoch": 1, "accuracy": 0.6, "objective": 0.6, "eval_isoscore_star": 0.3,
              CLOSING_ONLY: "eval_isoscore_star,eval_zeta"}
    second.on_trial_start(0, [], trial)
    trial.last_result = {"epoch": 2, "accuracy": 0.7, "objective": 0.7, "eval_isoscore_star": 0.4,
                         RESTORED_RECORDS: json.dumps([record])}
    second.on_trial_result(0, [], trial, trial.last_result)
    second.on_trial_complete(0, [], trial)
    assert second.close(timeout=60)
    runs = _trial_runs(client, experiment)
    assert _statuses(runs) == {"k-e1": ("finished", "FINISHED"), "k-e2": ("finished", "FINISHED")}

    def history(key, metric):
        return [(m.step, m.value) for m in client.get_metric_history(runs[key].info.run_id, metric)]

    assert history("k-e1", "accuracy") == [(1, 0.6)] and history("k-e2", "accuracy") == [(1, 0.6), (2, 0.7)]
    assert history("k-e1", "eval_isoscore_star") == [(1, 0.3)] and history("k-e2", "eval_isoscore_star") == [(2, 0.4)]


def test_a_resumed_trial_that_starts_over_though_tune_knew_of_a_later_epoch_still_writes_its_shorter_configuration(
        mlflow_store):
    """The driver died after a shared trial of epochs {1, 2} reported epoch 1 (Tune's restored state knows of it) but
    before the epoch's checkpoint was registered and before MLflow got the epoch: the resumed trial trains from its
    start, reporting epoch 1 again without restored records; the 1-epoch configuration gets it and ends (seen in CI
    under kill -9: its run had stayed running and empty)."""
    _, client, experiment = mlflow_store
    trial = _shared_trial("k", counts=(1, 2))
    second = _resumed_after_a_kill(mlflow_store, trial)
    second.on_trial_start(0, [], trial)  # the 1-epoch configuration looks passed: its run is not reopened
    for epoch in (1, 2):
        trial.last_result = {"epoch": epoch, "accuracy": 0.5 + epoch / 10, "objective": 0.5 + epoch / 10}
        second.on_trial_result(0, [], trial, trial.last_result)
    second.on_trial_complete(0, [], trial)
    assert second.close(timeout=60)
    runs = _trial_runs(client, experiment)
    assert _statuses(runs) == {"k-e1": ("finished", "FINISHED"), "k-e2": ("finished", "FINISHED")}
    steps = {k: [(m.step, m.value) for m in client.get_metric_history(r.info.run_id, "accuracy")]
             for k, r in runs.items()}
    assert steps == {"k-e1": [(1, 0.6)], "k-e2": [(1, 0.6), (2, 0.7)]}


def test_a_resumed_experiment_whose_trials_had_all_ended_repairs_their_runs_though_tune_takes_no_step(mlflow_store):
    uri, client, experiment = mlflow_store
    killed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    last = _trial("t1")
    killed.on_trial_start(0, [], last)
    killed.on_trial_result(0, [], last, {"epoch": 1, "accuracy": 0.5})
    assert killed.writer.flush(timeout=30)  # killed -9 just after the trial's "done" line: epoch 2 and its end lost
    last.status, last.last_result = "TERMINATED", {"epoch": 2, "accuracy": 0.75}
    resumed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    resumed.on_experiment_end([last])  # every restored trial had ended: Tune calls no on_step_begin
    assert resumed.close(timeout=30)
    (run,) = tracking.find_runs(client, experiment)
    assert run.data.tags[tracking.TAG_STATUS] == "finished" and run.info.status == "FINISHED"
    assert sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "accuracy")) == [
        (1, 0.5), (2, 0.75)]


def test_an_earlier_drivers_run_of_a_trial_tune_lost_is_ended_as_interrupted_when_the_experiment_ends(mlflow_store):
    uri, client, experiment = mlflow_store
    killed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    kept, lost, other = _trial("t1"), _trial("t2"), _trial("x1", search="another")
    for trial in (kept, lost):
        killed.on_trial_start(0, [], trial)
    neighbour = MlflowTrialLogger(uri, "another", "p2", experiment, {}, threads=1)
    neighbour.on_trial_start(0, [], other)
    assert killed.writer.flush(timeout=30) and neighbour.close(timeout=30)  # the disk fills: no end is written
    kept.status = "PENDING"  # Tune's last snapshot holds t1; t2, being created as the driver stopped, is lost
    resumed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    resumed.on_step_begin(0, [kept])
    resumed.on_trial_start(0, [kept], kept)
    resumed.on_trial_result(0, [kept], kept, {"epoch": 2, "accuracy": 0.75})
    kept.status, kept.last_result = "TERMINATED", {"epoch": 2, "accuracy": 0.75}
    resumed.on_trial_complete(0, [kept], kept)
    resumed.on_experiment_end([kept, other])
    assert resumed.close(timeout=30)
    runs = {r.data.tags[tracking.TAG_TRIAL_ID]: r for r in tracking.find_runs(client, experiment)}
    assert {k: (r.data.tags[tracking.TAG_STATUS], r.info.status) for k, r in runs.items()} == {
        "t1": ("finished", "FINISHED"), "t2": ("interrupted", "KILLED"), "x1": ("running", "RUNNING")}
    assert runs["t2"].data.tags[tracking.TAG_ERROR] == LOST and tracking.TAG_ERROR not in runs["t1"].data.tags


def test_a_trial_that_ended_before_the_kill_gets_every_epoch_the_killed_driver_never_wrote(mlflow_store, tmp_path):
    uri, client, experiment = mlflow_store
    killed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    plain, shared = _trial("t1", epochs=3, folder=tmp_path / "t1"), _shared_trial("t2", counts=(1, 3))
    shared.storage = _trial("t2", folder=tmp_path / "t2").storage
    for trial in (plain, shared):
        killed.on_trial_start(0, [], trial)
    assert killed.writer.flush(timeout=30)  # the runs exist; every epoch's write is lost with the driver
    for trial in (plain, shared):  # what Ray's logger had written: epoch 2 twice (a restore), a line cut short
        lines = [json.dumps({"epoch": e, "accuracy": e / 10, "trial_id": trial.trial_id}) for e in (1, 2, 2, 3)]
        lines[2] = lines[2].replace("0.2", "0.25")
        (tmp_path / trial.trial_id).mkdir()
        (tmp_path / trial.trial_id / "result.json").write_text("\n".join(lines) + '\n{"epoch": 4, "accur')
        trial.status, trial.last_result = "TERMINATED", {"epoch": 3, "accuracy": 0.3}
    assert [r["accuracy"] for r in reported_epochs(plain)] == [0.1, 0.25, 0.3]
    resumed = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    resumed.on_experiment_end([plain, shared])
    assert resumed.close(timeout=30)
    runs = {r.data.tags[tracking.TAG_TRIAL_ID]: r for r in tracking.find_runs(client, experiment)}
    history = {k: sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "accuracy"))
               for k, r in runs.items()}
    assert history == {"t1": [(1, 0.1), (2, 0.25), (3, 0.3)], "t2-e1": [(1, 0.1)],
                       "t2-e3": [(1, 0.1), (2, 0.25), (3, 0.3)]}
    assert {r.data.tags[tracking.TAG_STATUS] for r in runs.values()} == {"finished"}


def test_a_trial_without_a_readable_result_file_has_no_reported_epochs():
    assert reported_epochs(_trial("t9")) == []  # the reconcile then falls back on Tune's last result


def test_a_retry_after_a_systemic_failure_stops_the_search_there_and_a_trials_own_error_is_retried(mlflow_store,
                                                                                                   tmp_path):
    """Tune retries a failed trial (``max_failures``) before it calls ``on_trial_error``: a full disk stops the
    search at the first failure (no retry can free it) and the printer says where; a trial's own error is retried."""
    uri, client, experiment = mlflow_store
    logger = MlflowTrialLogger(uri, "s", tracking.parent_run(client, experiment, "s", {}), experiment, {}, threads=2)
    failures = []
    logger.stop = SimpleNamespace(fail=lambda cause, seen: failures.append((cause, seen)))
    lines = []
    printer = ProgressPrinter(total=2, write=lines.append)
    own, full = _trial("t1"), _trial("t2")
    own.error_file, full.error_file = str(tmp_path / "own.txt"), str(tmp_path / "full.txt")
    (tmp_path / "own.txt").write_text("Traceback (most recent call last):\nRuntimeError: CUDA out of memory")
    (tmp_path / "full.txt").write_text(f"Traceback (most recent call last):\n{FULL_DISK}")
    for trial in (own, full):
        logger.on_trial_start(0, [], trial)
        logger.on_trial_recover(0, [], trial)
        printer.on_trial_recover(0, [], trial)
    assert failures == [("no space left on the storage device", FULL_DISK)]
    name = "tiny-bert/rte istar λ=-1 ζ=0.2 lr=1e-4 bs=32 ep=2 s42"
    assert lines == [f"[1/2] trial t2 INTERRUPTED (no space left on the storage device) — {name}"]
    assert logger.close(timeout=60)
    retries = {k: r.data.tags.get("istar_tune.retries") for k, r in _trial_runs(client, experiment).items()}
    assert retries == {"t1": "1", "t2": "1"}


def test_a_run_written_again_from_rays_record_keeps_its_dataset_inputs_and_node(mlflow_store, tmp_path):
    # The store was lost (a node gone before the job copied it back): a resumed search writes the trial's run again
    # from Ray's result file, whose first report carried the splits the trial read and every report its node.
    from istar_tune.search.tune.reporter import DATASETS

    uri, client, experiment = mlflow_store
    trial = _trial("t1", epochs=2, folder=tmp_path / "t1")
    described = [{"name": "rte/train", "digest": "abc", "source": "/data/train.tsv", "checksum": "sha256:1",
                  "columns": {"input_ids": "Sequence"}, "rows": 64, "context": "training"}]
    lines = [json.dumps({"epoch": 1, "accuracy": 0.5, "node_id": "node-a", DATASETS: json.dumps(described)}),
             json.dumps({"epoch": 2, "accuracy": 0.6, "node_id": "node-a"})]
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "result.json").write_text("\n".join(lines) + "\n")
    trial.status, trial.last_result = "TERMINATED", {"epoch": 2, "accuracy": 0.6}
    logger = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    logger.on_experiment_end([trial])
    assert logger.close(timeout=30)
    [run] = tracking.find_runs(client, experiment)
    run = client.get_run(run.info.run_id)
    assert [(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs] == [("rte/train", "abc")]
    assert run.data.tags[tracking.TAG_NODE] == "node-a" and run.data.tags[tracking.TAG_STATUS] == "finished"


def test_a_trial_that_failed_before_its_first_report_still_says_what_it_read_and_where(mlflow_store, tmp_path):
    """Its record in its folder (written as it read its data), plain JSON: no error of Ray's is unpickled for it."""
    from istar_tune.search.tune.callbacks import read_record
    from istar_tune.search.tune.checkpoints import READ_RECORD

    uri, client, experiment = mlflow_store
    described = [{"name": "rte/validation", "digest": "def", "source": "/data/dev.tsv", "checksum": "sha256:2",
                  "columns": {"input_ids": "Sequence"}, "rows": 32, "context": "evaluation"}]
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / READ_RECORD).write_text(json.dumps({"datasets": described, "node_id": "node-b"}))
    trial = _trial("t1", folder=tmp_path / "t1")
    assert read_record(trial) == {"datasets": described, "node_id": "node-b"}
    assert read_record(_trial("t2", folder=tmp_path / "t2")) == {}  # it read nothing: nothing to say
    (tmp_path / "t3").mkdir()
    (tmp_path / "t3" / READ_RECORD).write_text('{"datasets": [')  # cut short: nothing rather than a guess
    assert read_record(_trial("t3", folder=tmp_path / "t3")) == {}
    logger = MlflowTrialLogger(uri, "s", "p", experiment, {}, threads=1)
    logger.on_trial_start(0, [], trial)
    logger.on_trial_error(0, [], trial)
    assert logger.close(timeout=30)
    [run] = tracking.find_runs(client, experiment)
    run = client.get_run(run.info.run_id)
    assert run.data.tags[tracking.TAG_NODE] == "node-b"
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["rte/validation"] and run.info.status == "FAILED"
