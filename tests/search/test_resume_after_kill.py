"""kill -9 of the driver at any moment of a search of real (tiny-bert, SST-2) trials, then ``--resume``: every
configuration has exactly one MLflow run, with its params, in the right group, ended, and the table is the one an
uninterrupted search gives."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.results.tables import build_table
from istar_tune.tracking.storage import default_tracking_uri

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent

LEARNING_RATES = {"0.001", "0.002", "0.003"}


def _trial_runs(uri: str) -> list:
    try:
        client = tracking.client(uri)
        experiment = client.get_experiment_by_name("killed")
        if experiment is None:
            return []
        return tracking.find_runs(client, experiment.experiment_id, **{tracking.TAG_ROLE: "trial"})
    except Exception:  # noqa: BLE001 - the store may not exist yet, or be locked for a moment
        return []


def _wait_for(moment: str, driver: subprocess.Popen, uri: str, deadline: float) -> None:
    """Block until the search reaches ``moment``: a trial's run exists but no epoch was reported (``start``), a
    trial is inside its second epoch (``mid-epoch``), or the first trial has just finished (``finishing``; Tune may
    not have saved that yet, so its last epoch may train again on resume: its records are not doubled)."""
    while time.monotonic() < deadline:
        if moment == "start":
            if _trial_runs(uri):
                return
            time.sleep(0.05)
            continue
        line = driver.stdout.readline()
        if moment == "mid-epoch" and " epoch 1/" in line:
            seconds = float(re.search(r"\((\d+(?:\.\d+)?) s\)", line).group(1))
            time.sleep(seconds / 2)  # half way through epoch 2 of the first trial
            return
        if moment == "finishing" and line.startswith("[1/"):
            return
    raise AssertionError(f"the search did not reach {moment!r} in time")


def _driver(space: Path, storage: Path, env: dict) -> tuple[list[str], subprocess.Popen]:
    """The search command and its driver, started in its own process group (with its local Ray instance)."""
    command = [str(BIN / "istar-tune"), "search", str(space), "--storage-path", str(storage)]
    return command, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)


@pytest.mark.parametrize("moment", ["start", "mid-epoch", "finishing"])
def test_kill_9_of_the_driver_then_resume_gives_one_complete_run_per_configuration(moment, real_search, tmp_path,
                                                                                   migrated_store):
    space, env = real_search("killed", epochs=2, rates=["1.0e-3", "2.0e-3", "3.0e-3"], concurrency=1)
    storage = tmp_path / "runs"
    migrated_store(storage)
    uri = default_tracking_uri(storage)
    command, driver = _driver(space, storage, env)
    try:
        _wait_for(moment, driver, uri, time.monotonic() + 240)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its local Ray instance die at once
        driver.wait()

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=env,
                             timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    runs = _trial_runs(uri)
    assert len(runs) == 3 and len({r.data.tags[tracking.TAG_TRIAL_ID] for r in runs}) == 3
    assert {r.data.params.get("learning_rate") for r in runs} == LEARNING_RATES  # every run has its params
    assert {r.data.tags[tracking.TAG_GROUP] for r in runs} == {"tiny-bert/sst2/base"}
    assert {r.data.tags[tracking.TAG_STATUS] for r in runs} == {"finished"}
    table = build_table(uri, "killed", "best", tasks=["sst2"])
    assert list(zip(table["model"], table["method"], table["trials"])) == [("tiny-bert", "base", 3)]
    client = tracking.client(uri)
    for run in runs:  # each epoch recorded once, an epoch trained again included
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "accuracy")) == [1, 2]
    experiment = client.get_experiment_by_name("killed").experiment_id
    assert len(tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "search"})) == 1


def _histories(uri: str, name: str) -> dict[tuple[str, str], dict[str, list]]:
    """Per configuration (learning rate, epochs): its status and the history of every record compared."""
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name(name).experiment_id
    out = {}
    for run in tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"}):
        key = (run.data.params["learning_rate"], run.data.params["epochs"])
        assert key not in out, f"two runs of {key}"
        out[key] = {"status": run.data.tags[tracking.TAG_STATUS],
                    **{m: [(h.step, h.value) for h in sorted(client.get_metric_history(run.info.run_id, m),
                                                            key=lambda h: h.step)]
                       for m in ("accuracy", "eval_isoscore", "eval_isoscore_star", "train_loss", "objective")}}
    return out


SHARED_RATES = ["1.0e-3", "3.0e-3"]


@pytest.fixture(scope="module")
def unshared_reference(real_search_for_module, migrated_store) -> dict:
    """The records of an unshared, uninterrupted search of the grid the shared tests stop and resume (run once)."""
    space, env = real_search_for_module("reference", epochs=[1, 2], rates=SHARED_RATES, concurrency=1, share=False)
    storage = space.parent / "runs"
    migrated_store(storage)
    plain = subprocess.run([str(BIN / "istar-tune"), "search", str(space), "--storage-path", str(storage)],
                           capture_output=True, text=True, env=env, timeout=400)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    return _histories(default_tracking_uri(storage), "reference")


@pytest.mark.parametrize("stop", ["kill-9", "sigint"])
def test_a_shared_trial_stopped_in_its_last_epoch_then_resumed_gives_each_configuration_its_records(
        stop, real_search, unshared_reference, tmp_path, migrated_store):
    """Shared trials of epochs {1, 2}: the driver stopped half way through epoch 2 of the first trial (its 1-epoch
    configuration already finished), then ``--resume``; every configuration has one run whose records are those of
    an unshared, uninterrupted search of the same grid."""
    space, env = real_search("killed", epochs=[1, 2], rates=SHARED_RATES, concurrency=1)
    storage = tmp_path / "runs"
    migrated_store(storage)
    uri = default_tracking_uri(storage)
    command, driver = _driver(space, storage, env)
    try:
        _wait_for("mid-epoch", driver, uri, time.monotonic() + 240)
        if stop == "sigint":
            os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C in a terminal
            assert driver.wait(timeout=180) == 130
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=env, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "4 configurations in 2 trials (epoch prefixes shared), 4 finished" in resumed.stdout

    shared = _histories(uri, "killed")
    assert len(shared) == 4 and shared == unshared_reference
    assert all(v["status"] == "finished" and [s for s, _ in v["accuracy"]] == list(range(1, int(k[1]) + 1))
               for k, v in shared.items())
