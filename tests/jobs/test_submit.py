"""A killed and resumed search, and a real `ray job submit` to a head on 127.0.0.1 logging to an MLflow server."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.tracking.storage import default_tracking_uri

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(glue_tiny) -> dict[str, str]:
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "GLUE_DIR": str(glue_tiny), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def _stop_processes_of(*markers: str, grace_s: float = 10.0) -> None:
    """Terminate (then kill) every process whose command line names one of ``markers``, and their descendants."""
    import psutil

    found = {}
    for process in psutil.process_iter(["cmdline"]):
        try:
            command = process.info["cmdline"] or ()
            if process.pid != os.getpid() and any(marker in part for marker in markers for part in command):
                found[process.pid] = process
                found.update((child.pid, child) for child in process.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    mine = list(found.values())
    for process in mine:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(mine, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_killed_search_resumes_without_rerunning_finished_trials_or_duplicating_runs(glue_tiny, tmp_path,
                                                                                   migrated_store, space_yaml):
    space = tmp_path / "resume.yaml"
    space.write_text(space_yaml(name="resume", concurrency=1, hyperparameters={
        "epochs": 3, "learning_rate": {"grid": [1.0e-3, 2.0e-3, 3.0e-3, 4.0e-3]}}))
    storage = tmp_path / "runs"
    migrated_store(storage)
    command = [str(BIN / "istar-tune"), "search", str(space), "--storage-path", str(storage)]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_env(glue_tiny), start_new_session=True)
    finished_before_kill = []
    deadline = time.monotonic() + 240
    for line in driver.stdout:
        if line.startswith("[") and " done: " in line:
            finished_before_kill.append(line.split("trial ")[1].split()[0])
        if len(finished_before_kill) == 2 or time.monotonic() > deadline:
            break
    time.sleep(3)  # trial 3 is running; the finished trials are in the experiment snapshot
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and its local Ray instance die at once
    driver.wait()
    assert len(finished_before_kill) == 2

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=_env(glue_tiny),
                             timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "4 trials, 4 finished, 0 stopped early, 0 failed" in resumed.stdout
    for trial_id in finished_before_kill:
        assert f"trial {trial_id} epoch" not in resumed.stdout  # finished trials are not run again

    # Ray recorded each finished trial's three epochs once.
    results = list((storage / "resume").glob("trainable_*/result.json"))
    assert len(results) == 4
    for result in results:
        trial_id = json.loads(result.read_text().splitlines()[0])["trial_id"]
        if trial_id in finished_before_kill:
            assert len(result.read_text().splitlines()) == 3

    uri = default_tracking_uri(storage)
    runs = tracking.trial_runs(uri, "resume")
    assert len(runs) == 4 and len({r.trial_id for r in runs}) == 4  # exactly one child run per trial
    client = tracking.client(uri)
    for run in runs:
        assert run.status == "finished"
        assert sorted(m.step for m in client.get_metric_history(run.run_id, "accuracy")) == [1, 2, 3]
    experiment = client.get_experiment_by_name("resume").experiment_id
    assert len(tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "search"})) == 1


def _wait_for(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {seconds} s")


def _mlflow(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture
def ray_head_and_mlflow_server(glue_tiny, tmp_path):
    # Token authentication on, as jobs/submit.sh and jobs/cluster.yaml tell users to run: the head, the job server
    # and the submitting shell read one token file, readable by its owner alone.
    token = tmp_path / "auth_token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    env = {**_env(glue_tiny), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    ray_port, dashboard_port, mlflow_port = _free_port(), _free_port(), _free_port()
    server_env = {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no GenAI job workers: 2 cores here
    mlflow_server = subprocess.Popen(
        # Proxied artifacts, as on a cluster: clients upload and download through the server, never to its disk.
        [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         "--serve-artifacts", "--artifacts-destination", str(tmp_path / "artifacts"), "--host", "127.0.0.1",
         "--port", str(mlflow_port),
         "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_env,
        start_new_session=True)
    # A temp dir of its own (short: Ray's socket paths must fit 107 bytes) and its port mark this head's processes,
    # so teardown stops them and their children and nothing else: `ray stop` stops every Ray instance on the machine.
    temp_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    started = subprocess.run(
        [str(BIN / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(ray_port),
         "--temp-dir", temp_dir,
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard_port), "--include-dashboard", "true",
         # its job agent on free ports: another Ray instance on the machine (a test beside this one) holds the defaults
         "--dashboard-agent-listen-port", str(_free_port()), "--dashboard-agent-grpc-port", str(_free_port()),
         "--num-cpus", "2", "--disable-usage-stats"], capture_output=True, text=True, env=env, timeout=120)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        _wait_for(f"http://127.0.0.1:{mlflow_port}/health")
        yield f"http://127.0.0.1:{dashboard_port}", f"http://127.0.0.1:{mlflow_port}", env
    finally:
        _stop_processes_of(temp_dir, f":{ray_port}")
        shutil.rmtree(temp_dir, ignore_errors=True)
        os.killpg(mlflow_server.pid, signal.SIGTERM)
        mlflow_server.wait(timeout=30)


def test_ray_job_submit_runs_the_smoke_search_and_logs_to_an_mlflow_server(ray_head_and_mlflow_server, glue_tiny,
                                                                             tmp_path):
    job_address, mlflow_uri, env = ray_head_and_mlflow_server
    env = {**env, "RAY_ADDRESS": job_address, "MLFLOW_TRACKING_URI": mlflow_uri,
           "STORAGE_PATH": str(tmp_path / "ray-results")}
    deadline = time.monotonic() + 240
    while True:  # the head answers before its job agent has registered (minutes on a loaded machine): wait for it
        submitted = subprocess.run(
            [str(ROOT / "jobs" / "submit.sh"), "search_spaces/smoke.yaml", "--tasks", "rte", "--data-dir",
             str(glue_tiny)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=420)
        if ("No available agent to submit job" not in submitted.stdout + submitted.stderr or
                time.monotonic() > deadline):
            break
        time.sleep(3)
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    token = Path(env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    listing = urllib.request.Request(f"{job_address}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    jobs = json.loads(urllib.request.urlopen(listing, timeout=30).read())
    assert [job["status"] for job in jobs] == ["SUCCEEDED"]
    # An outsider on the machine: without the token the job server refuses, with another token too, and so does
    # `ray job submit` with auth off.
    for headers, code in (({}, 401), ({"Authorization": f"Bearer {'0' * 64}"}, 403)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{job_address}/api/jobs/", headers=headers), timeout=30)
        assert refused.value.code == code
    outsider = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN_PATH"} | {"RAY_AUTH_MODE": "disabled",
                                                                                 "HOME": str(tmp_path)}
    denied = subprocess.run([str(BIN / "ray"), "job", "submit", "--address", job_address, "--", "echo", "ran"],
                            capture_output=True, text=True, env=outsider, timeout=120)
    assert denied.returncode != 0 and "ran" not in denied.stdout.splitlines(), denied.stdout[-2000:]

    experiment = _mlflow(mlflow_uri, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=smoke")
    experiment_id = experiment["experiment"]["experiment_id"]
    runs = _mlflow(mlflow_uri, "/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id],
                                                               "max_results": 100})["runs"]
    tags = [{t["key"]: t["value"] for t in run["data"]["tags"]} for run in runs]
    parents = [run for run, tag in zip(runs, tags) if tag.get(tracking.TAG_ROLE) == "search"]
    children = [(run, tag) for run, tag in zip(runs, tags) if tag.get(tracking.TAG_ROLE) == "trial"]
    assert len(parents) == 1 and len(children) == 4  # 2 methods x 2 learning rates on RTE
    assert len({tag[tracking.TAG_TRIAL_ID] for _, tag in children}) == 4
    for run, tag in children:
        assert tag[tracking.TAG_SEARCH_RUN] == parents[0]["info"]["run_id"]
        assert run["info"]["status"] == "FINISHED"
        history = _mlflow(mlflow_uri, "/api/2.0/mlflow/metrics/get-history?run_id="
                          f"{run['info']['run_id']}&metric_key=accuracy")["metrics"]
        assert sorted(m["step"] for m in history) == [1, 2]

    # From another working folder, with only MLFLOW_TRACKING_URI naming the server: the table reads that server, and
    # a plot logged there is served back through the server's REST API.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    table = subprocess.run([str(BIN / "istar-tune"), "table", "--experiment", "smoke", "--kind", "best"],
                           capture_output=True, text=True, env=env, cwd=elsewhere, timeout=120)
    assert table.returncode == 0, table.stderr[-2000:]
    for method in ("base", "istar"):  # the job's two groups, each the best of its 2 trials, read from the server
        row = rf"\| tiny-bert \| rte \| {method} \| accuracy \| [\d.]+ \|.*\| 2 \|"
        assert re.search(row, table.stdout), table.stdout
    assert not (elsewhere / "istar-runs").exists()  # no local store was created or read
    plots = subprocess.run([str(BIN / "istar-tune"), "plots", "--experiment", "smoke", "--output-dir", "figures"],
                           capture_output=True, text=True, env=env, cwd=elsewhere, timeout=180)
    assert plots.returncode == 0, plots.stderr[-2000:]
    written = sorted((elsewhere / "figures").glob("*.png"))
    assert written
    parent_id = parents[0]["info"]["run_id"]
    listed = _mlflow(mlflow_uri, f"/api/2.0/mlflow/artifacts/list?run_id={parent_id}&path=plots")["files"]
    assert {Path(f["path"]).name for f in listed} == {p.name for p in written}
    url = f"{mlflow_uri}/get-artifact?path=plots/{written[0].name}&run_uuid={parent_id}"
    served = urllib.request.urlopen(url, timeout=30).read()
    assert served == written[0].read_bytes() and served[:8] == b"\x89PNG\r\n\x1a\n"
