"""Safe and honest under faults, as a user meets them from the command line (simulated trials: no training)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.tracking.storage import default_tracking_uri

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent

SPACE = """\
name: faults
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
  batch_size: 32
  epochs: 3
  learning_rate: {grid: [1.0e-5, 2.0e-5, 3.0e-5, 4.0e-5, 5.0e-5, 6.0e-5]}
concurrency: 2
resources: {cpu: 1}
settings: {checkpoint: resume}
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                                                              "MLFLOW_TRACKING_URI", "GLUE_DIR")}
    return {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}


def _search(tmp_path: Path, *flags: str, space: str = SPACE) -> list[str]:
    path = tmp_path / "space.yaml"
    path.write_text(space)
    return [str(BIN / "istar-tune"), "search", str(path), "--storage-path", str(tmp_path / "runs"), "--simulate",
            "--time-factor", "0.05", *flags]


def _tree_pids(root: int) -> set[int]:
    import psutil

    try:
        parent = psutil.Process(root)
    except psutil.NoSuchProcess:
        return set()
    return {root, *(p.pid for p in parent.children(recursive=True))}


def test_a_local_search_listens_on_loopback_only(tmp_path):
    import psutil

    driver = subprocess.Popen(_search(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_env(), start_new_session=True)
    listening = set()
    try:
        for line in driver.stdout:
            if " done: " in line:  # trials are running: every Ray process is up
                pids = _tree_pids(driver.pid)
                for connection in psutil.net_connections(kind="inet"):
                    if connection.status == psutil.CONN_LISTEN and connection.pid in pids:
                        listening.add(connection.laddr.ip)
                break
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert listening, "no listening socket found"
    assert listening <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, listening


def test_ctrl_c_stops_honestly_and_resume_finishes_a_search_named_with_a_quote(tmp_path):
    name = "it's"
    command = _search(tmp_path, "--name", name)
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                              start_new_session=True)
    output = []
    for line in driver.stdout:
        output.append(line)
        if line.startswith("[2/6]"):
            driver.send_signal(signal.SIGINT)
            break
    rest, _ = driver.communicate(timeout=180)
    output.append(rest)
    text = "".join(output)
    assert driver.returncode == 130, text[-3000:]
    assert "INTERRUPTED" in text and "continue with --resume" in text

    uri = default_tracking_uri(tmp_path / "runs")
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name(name).experiment_id
    runs = tracking.find_runs(client, experiment)
    assert runs and all(r.info.status != "RUNNING" for r in runs)
    parent = [r for r in runs if r.data.tags.get(tracking.TAG_ROLE) == "search"]
    assert len(parent) == 1 and parent[0].info.status == "KILLED"
    trials = [r for r in runs if r.data.tags.get(tracking.TAG_ROLE) == "trial"]
    finished = [r for r in trials if r.data.tags[tracking.TAG_STATUS] == "finished"]
    assert all(int(r.data.metrics["epoch"]) == 3 for r in finished)  # nothing counted finished that did not
    assert all(r.data.tags[tracking.TAG_STATUS] in ("finished", "interrupted") for r in trials)

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=_env(), timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "6 trials, 6 finished" in resumed.stdout
    counted = [int(n) for n in re.findall(r"^\[(\d+)/6\] trial", resumed.stdout, re.MULTILINE)]
    assert counted == list(range(len(finished) + 1, 7))  # the count goes on from the trials the first run finished
    said = resumed.stdout + resumed.stderr  # library notices only with --debug: none of Ray's restore or dedup notes
    assert "Restored on" not in said and "repeated" not in said and "\x1b[" not in said, said[-3000:]
    trials = tracking.trial_runs(uri, name, simulated=True)
    assert len(trials) == 6 and len({t.trial_id for t in trials}) == 6  # one run per trial across both drivers
    assert all(t.status == "finished" for t in trials)
    for trial in trials:
        steps = sorted(m.step for m in client.get_metric_history(trial.run_id, "accuracy"))
        assert steps == [1, 2, 3]


def test_a_trial_no_node_can_hold_is_refused_within_seconds(tmp_path):
    began = time.monotonic()
    # A rehearsal declares no logical GPU here (--gpus 0), as a real local search on a CPU-only machine has none.
    done = subprocess.run(_search(tmp_path, "--gpus", "0",
                                  space=SPACE.replace("resources: {cpu: 1}", "resources: {cpu: 1, gpu: 1}")),
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "asks for 1 GPU(s)" in done.stderr and "the cluster has 0 GPU(s)" in done.stderr
    assert time.monotonic() - began < 60
    assert not (tmp_path / "runs").exists()  # nothing created


def test_resume_refuses_a_second_driver_and_a_changed_grid(tmp_path):
    from istar_tune.search import guard

    finished = subprocess.run(_search(tmp_path), capture_output=True, text=True, env=_env(), timeout=300)
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
    held = guard.hold(str(tmp_path / "runs"), "faults")  # as a first --resume still running would
    try:
        second = subprocess.run(_search(tmp_path, "--resume"), capture_output=True, text=True, env=_env(),
                                timeout=120)
    finally:
        held.release()
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
    assert "search 'faults' in " in second.stderr and f"is already running (pid {os.getpid()}" in second.stderr

    changed = SPACE.replace("6.0e-5]", "6.0e-5, 7.0e-5]")
    refused = subprocess.run(_search(tmp_path, "--resume", space=changed), capture_output=True, text=True,
                             env=_env(), timeout=120)
    assert refused.returncode == 2 and "the search space of faults changed since the search started" in refused.stderr
    runs_before = _runs(tmp_path)
    ray_temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    try:
        accepted = subprocess.run(_search(tmp_path, "--resume", "--accept-changed-space", space=changed),
                                  capture_output=True, text=True, env={**_env(), "RAY_TMPDIR": str(ray_temp)},
                                  timeout=300)
        assert accepted.returncode == 0, accepted.stdout[-2000:] + accepted.stderr[-2000:]
        assert "6 trials, 6 finished" in accepted.stdout  # the grid the search started with
        # Every trial had ended: summarised from Tune's saved state, no Ray instance started to run nothing.
        assert "every trial had ended; nothing to run" in accepted.stdout and "cluster resources" not in accepted.stdout
        assert not list(ray_temp.rglob("session_*")), sorted(ray_temp.rglob("*"))[:5]
        assert "Traceback" not in accepted.stderr and "Downloading" not in accepted.stderr, accepted.stderr[-2000:]
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    after = _runs(tmp_path)  # the same runs, each as it was; the search's run ended again
    assert {k: v for k, v in after.items() if k != "search"} == {k: v for k, v in runs_before.items() if k != "search"}
    assert after["search"] == "FINISHED"


def _runs(tmp_path: Path) -> dict[str, object]:
    """Each trial run's status, status tag and metrics, and the search run's status, by trial id."""
    client = tracking.client(default_tracking_uri(str(tmp_path / "runs")))
    runs = tracking.find_runs(client, client.get_experiment_by_name("faults").experiment_id)
    found: dict[str, object] = {r.data.tags.get(tracking.TAG_TRIAL_ID, r.info.run_id): (
        r.info.status, r.data.tags.get(tracking.TAG_STATUS), r.data.metrics) for r in runs
        if r.data.tags.get(tracking.TAG_ROLE) == "trial"}
    found["search"] = next(r.info.status for r in runs if r.data.tags.get(tracking.TAG_ROLE) == "search")
    return found


@pytest.mark.parametrize("delay", [0.0, 1.5])
def test_ctrl_c_right_after_the_preflight_line_stops_the_search_and_resume_then_runs_it(delay, tmp_path):
    command = _search(tmp_path)
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                              start_new_session=True)
    output = []
    for line in driver.stdout:
        output.append(line)
        if line.startswith("preflight:"):  # the tracking store and the parent run are being written now
            time.sleep(delay)
            os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the whole group
            break
    rest, _ = driver.communicate(timeout=180)
    text = "".join(output) + rest
    assert driver.returncode == 130, text[-3000:]
    assert "INTERRUPTED (interrupted by SIGINT (Ctrl-C)): 6 of 6 trials did not finish; continue with --resume" in text
    assert "Traceback" not in text
    uri = default_tracking_uri(tmp_path / "runs")
    client = tracking.client(uri)
    runs = tracking.find_runs(client, client.get_experiment_by_name("faults").experiment_id)
    assert [r.info.status for r in runs if r.data.tags.get(tracking.TAG_ROLE) == "search"] == ["KILLED"]
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=_env(), timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "6 trials, 6 finished" in resumed.stdout
