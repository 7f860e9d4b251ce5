"""A fused trial's result as its members' runs read it: each member its own record where it reported the epoch, its
error once it failed, nothing while it rests; the MLflow logger gives each member a run of its own (a failed member
FAILED alone, a member the resumed bundle carried its earlier records for gets them); the summary reads each member's
own status, score and epochs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow.fs

from istar_tune import tracking
from istar_tune.search.tune.callbacks import MlflowTrialLogger
from istar_tune.search.tune.fused import member_ended, member_index, member_last, member_view
from istar_tune.trial_config import fuse


def _fused_config(epochs=(2, 2, 1)):
    base = {"model": "tiny-bert", "task": "rte", "method": "istar", "lam": -1.0, "zeta": 0.2, "search": "s"}
    configs = [{**base, "learning_rate": lr, "epochs": e} for lr, e in zip((1e-3, 2e-3, 3e-3), epochs)]
    (trial,) = fuse(configs, 4)
    return trial


def _trial(trial_id="b", folder=None):
    folder = str(folder or f"/nonexistent/{trial_id}")
    storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=folder,
                              trial_driver_staging_path=folder)
    return SimpleNamespace(trial_id=trial_id, config=_fused_config(), last_result={}, error_file=None, num_failures=0,
                           get_error=lambda: None, storage=storage, status="RUNNING")


ERROR = "TrainingError: the loss became nan at epoch 1, step 3: lower the learning rate (0.002) or |lam| (-1.0)"


def _epoch_one():
    """The bundle's first result: member 0 and 2 reported epoch 1, member 1 failed in it."""
    return {"epoch": 1, "objective": 0.6, "node_id": "n1",
            "m0/epoch": 1, "m0/accuracy": 0.6, "m0/objective": 0.6, "m0/reached": 1,
            "m1/error": ERROR,
            "m2/epoch": 1, "m2/accuracy": 0.5, "m2/objective": 0.5, "m2/reached": 1}


def test_each_member_reads_its_own_part_of_the_bundles_result():
    result = _epoch_one()
    assert member_view(result, 0) == {"epoch": 1, "objective": 0.6, "node_id": "n1", "accuracy": 0.6}
    assert member_view(result, 1) == {"error": ERROR}
    later = {"epoch": 2, "objective": 0.7, "m0/epoch": 2, "m0/accuracy": 0.7, "m0/objective": 0.7, "m0/reached": 2,
             "m2/objective": 0.5, "m2/reached": 1}
    assert member_view(later, 2) is None  # its one epoch is over: it rests
    assert member_ended(later, 2) == (0.5, 1, "") and member_ended(result, 1) == (None, 0, ERROR)
    assert member_index("b-m2") == 2 and member_index("b-e2") is None and member_index("abc_00001") is None
    assert member_index("abc_00001-m3-e2") == 3  # a shared member's configuration of 2 epochs
    assert member_last(later, 2) == {"objective": 0.5, "reached": 1, "epoch": 1}
    assert member_last(result, 1) == {"error": ERROR, "epoch": 0}


def _runs(client, experiment) -> dict:
    found = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    return {r.data.tags[tracking.TAG_TRIAL_ID]: r for r in found}


def test_each_member_gets_its_run_and_a_failed_member_ends_failed_alone(mlflow_store):
    uri, client, experiment = mlflow_store
    logger = MlflowTrialLogger(uri, "s", tracking.parent_run(client, experiment, "s", {}), experiment, {}, threads=2)
    trial = _trial()
    logger.on_trial_start(0, [], trial)
    trial.last_result = _epoch_one()
    logger.on_trial_result(0, [], trial, trial.last_result)
    trial.last_result = {"epoch": 2, "objective": 0.7, "m0/epoch": 2, "m0/accuracy": 0.7, "m0/objective": 0.7,
                         "m0/reached": 2, "m1/error": ERROR, "m2/objective": 0.5, "m2/reached": 1}
    logger.on_trial_result(0, [], trial, trial.last_result)
    logger.on_trial_complete(0, [], trial)
    assert logger.close(timeout=60)
    runs = _runs(client, experiment)
    assert {k: (r.data.tags[tracking.TAG_STATUS], r.info.status) for k, r in runs.items()} == {
        "b-m0": ("finished", "FINISHED"), "b-m1": ("failed", "FAILED"), "b-m2": ("finished", "FINISHED")}
    assert runs["b-m1"].data.tags[tracking.TAG_ERROR] == ERROR
    assert all(r.data.tags[tracking.TAG_TRAINED_BY] == "b" for r in runs.values())
    assert {k: r.data.params["learning_rate"] for k, r in runs.items()} == {"b-m0": "0.001", "b-m1": "0.002",
                                                                             "b-m2": "0.003"}
    assert all(r.data.params["setting.fused"] == "yes" for r in runs.values())

    def history(key):
        return [(m.step, m.value) for m in client.get_metric_history(runs[key].info.run_id, "accuracy")]

    assert history("b-m0") == [(1, 0.6), (2, 0.7)] and history("b-m2") == [(1, 0.5)] and history("b-m1") == []
    assert "m0/accuracy" not in runs["b-m0"].data.metrics and "reached" not in runs["b-m0"].data.metrics


def test_a_resumed_bundle_writes_each_members_epochs_a_killed_driver_never_wrote(mlflow_store):
    uri, client, experiment = mlflow_store
    parent = tracking.parent_run(client, experiment, "s", {})
    first = MlflowTrialLogger(uri, "s", parent, experiment, {}, threads=2)
    trial = _trial("k")
    first.on_trial_start(0, [], trial)
    assert first.close(timeout=60)  # the runs exist, nothing else was written: the driver is gone
    second = MlflowTrialLogger(uri, "s", parent, experiment, {}, threads=2)
    trial.last_result = {"epoch": 1, "m0/reached": 1, "m2/reached": 1}
    second.on_trial_start(0, [], trial)
    records = {i: [{"epoch": 1, "accuracy": value, "objective": value}] for i, value in ((0, 0.6), (2, 0.4))}
    trial.last_result = {"epoch": 2, "objective": 0.7, "m0/epoch": 2, "m0/accuracy": 0.7, "m0/objective": 0.7,
                         "m0/reached": 2, "m1/error": ERROR, "m2/objective": 0.4, "m2/reached": 1,
                         **{f"m{i}/restored_records": json.dumps(r) for i, r in records.items()}}
    second.on_trial_result(0, [], trial, trial.last_result)
    second.on_trial_complete(0, [], trial)
    assert second.close(timeout=60)
    runs = _runs(client, experiment)
    assert {k: r.data.tags[tracking.TAG_STATUS] for k, r in runs.items()} == {
        "k-m0": "finished", "k-m1": "failed", "k-m2": "finished"}

    def history(key):
        return [(m.step, m.value) for m in client.get_metric_history(runs[key].info.run_id, "accuracy")]

    assert history("k-m0") == [(1, 0.6), (2, 0.7)] and history("k-m2") == [(1, 0.4)]
