"""jobs/slurm/search.sbatch on a real Slurm: a one-node cluster (Debian's slurmctld, slurmd and munged) started on
127.0.0.1 by the test, with two logical GPUs declared through GRES. A search submitted with sbatch ends COMPLETED with
a FINISHED run per configuration and the table of the same search run locally; a search stopped by SIGTERM (as the
time limit's `--signal` sends it) requeues itself and resumes with no trial run twice and no duplicate run.

The cluster runs in a PID namespace of its own (`unshare`), as a node of its own would: `ray symmetric-run` refuses a
node where it sees any other Ray instance, and the suite's other worker runs its own beside this one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from istar_tune import tracking

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TEMPLATE = ROOT / "jobs" / "slurm" / "search.sbatch"
DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "unshare")

SLURM_CONF = """\
ClusterName=istartest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=8000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""

# PID 1 of the namespace reaps what the daemons leave behind, as init does.
START = """\
set -e
munged --key-file={root}/munge.key --socket={root}/munge.socket --pid-file={root}/munged.pid \
  --log-file={root}/munged.log --seed-file={root}/munge.seed -f
slurmctld -i
slurmd -N localhost
exec {python} -c 'import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)'
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing() -> str | None:
    absent = [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if absent:
        return f"Slurm is not installed here (no {', '.join(absent)}): `apt-get install slurm-wlm munge`"
    if os.geteuid() != 0:
        return "the one-node Slurm cluster runs its daemons as root"
    return None


@pytest.fixture(scope="module")
def slurm(glue_tiny):
    """The one-node cluster; yields the environment its commands (sbatch, scontrol) and the template run with."""
    if (why := _missing()) is not None:
        if os.environ.get("CI"):
            pytest.fail(why + " (.ci/run installs it)")
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="sl-", dir="/tmp"))  # short: Ray's socket paths live under it too
    for folder in ("state", "spool", "dev", "local"):
        (root / folder).mkdir()
    (root / "munge.key").write_bytes(os.urandom(1024))
    (root / "munge.key").chmod(0o400)
    for device in ("gpu0", "gpu1"):  # two logical GPUs: character devices Slurm can hand out (copies of /dev/null)
        os.mknod(root / "dev" / device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "slurm.conf").write_text(SLURM_CONF.format(root=root, ctld_port=_free_port(), slurmd_port=_free_port(),
                                                       cpus=os.cpu_count() or 2))
    (root / "gres.conf").write_text(f"NodeName=localhost Name=gpu File={root}/dev/gpu[0-1]\n")
    (root / "start.sh").write_text(START.format(root=root, python=sys.executable))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"), "PATH": f"/usr/sbin:{os.environ.get('PATH', '')}",
           "RAY_AUTH_MODE": "disabled", "GLUE_DIR": str(glue_tiny), "ISTAR_TUNE_VENV": str(BIN.parent),
           "ISTAR_TUNE_LOCAL": str(root / "local"), "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    namespace = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "bash", str(root / "start.sh")],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=env)
            if state.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline or namespace.poll() is not None:
                logs = "\n".join((root / name).read_text()[-1500:] for name in ("slurmctld.log", "slurmd.log")
                                 if (root / name).exists())
                pytest.fail(f"the one-node Slurm cluster did not come up: {state.stdout} {state.stderr}\n{logs}")
            time.sleep(0.5)
        yield env, root
    finally:
        import psutil

        for child in psutil.Process(namespace.pid).children():
            child.send_signal(signal.SIGKILL)  # PID 1 of the namespace: every process in it ends with it
        namespace.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _submit(env: dict, root: Path, space: Path, results: Path, *sbatch_options: str) -> str:
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--gpus-per-task=2", f"--cpus-per-task={os.cpu_count() or 2}",
         "--time=30", f"--output={root}/job-%j.out", *sbatch_options, str(TEMPLATE), str(space)],
        capture_output=True, text=True, env={**env, "ISTAR_TUNE_RESULTS": str(results)}, cwd=ROOT, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def _job(env: dict, job: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, env=env)
    return dict(re.findall(r"(\w+)=(\S*)", shown.stdout))


def _wait_until_ended(env: dict, root: Path, job: str, seconds: float = 420) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = _job(env, job)
        if state.get("JobState") in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}:
            return state
        if state.get("JobState") == "PENDING" and state.get("Reason") == "BeginTime":
            # a requeued job waits Slurm's fixed two minutes before it may start again: start it now
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, check=True)
        time.sleep(1)
    pytest.fail(f"job {job} did not end within {seconds} s: {_job(env, job)}\n{_log(root, job)[-3000:]}")


def _log(root: Path, job: str) -> str:
    path = root / f"job-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


COMPUTED = ("accuracy", "train_loss", "task_loss", "eval_isoscore")
"""What a trial computes (its other metrics are timings)."""

SPACE = """\
name: {name}
models: [tiny-bert]
tasks: [sst2]
methods: [base]
hyperparameters:
  batch_size: 16
  epochs: 3
  learning_rate: {{grid: {grid}}}
concurrency: {concurrency}
resources: {{cpu: 1, gpu: 1}}
settings: {{max_length: 32, shrinkage_tokens: 1000}}
"""


def _table(env: dict, name: str, storage: Path) -> str:
    """The search's best-configuration table, without its trial ids."""
    table = subprocess.run([str(BIN / "istar-tune"), "table", "--experiment", name, "--storage-path", str(storage),
                            "--format", "csv"], capture_output=True, text=True, env=env, timeout=120)
    assert table.returncode == 0, table.stderr
    header, *rows = [line.split(",") for line in table.stdout.splitlines()]
    return "\n".join(",".join(cell for column, cell in zip(header, row) if column != "trial_id") for row in rows)


def test_template_pins_the_ray_it_is_tested_with():
    import ray

    pinned = re.search(r"Ray (\d+\.\d+\.\d+), the version this template is tested with", TEMPLATE.read_text())
    assert pinned is not None and pinned.group(1) == ray.__version__


def test_sbatch_search_completes_with_a_run_per_configuration_and_the_local_table(slurm, tmp_path):
    env, root = slurm
    space = tmp_path / "slurmgrid.yaml"
    space.write_text(SPACE.format(name="slurmgrid", grid="[1.0e-3, 3.0e-3, 1.0e-2]", concurrency=2))
    results = tmp_path / "shared"
    job = _submit(env, root, space, results)
    state = _wait_until_ended(env, root, job)
    log = _log(root, job)
    assert state["JobState"] == "COMPLETED", log[-4000:]
    assert "On head node. Starting Ray cluster head" in log  # symmetric-run started Ray and ran the search
    assert "search slurmgrid: 3 trials, 3 finished" in log
    assert f"MLflow store kept in {results}/mlflow.db" in log

    runs = tracking.trial_runs(f"sqlite:///{results / 'mlflow.db'}", "slurmgrid")
    assert len(runs) == 3 and len({r.trial_id for r in runs}) == 3
    assert {r.status for r in runs} == {"finished"}
    assert sorted(r.config["learning_rate"] for r in runs) == [1e-3, 3e-3, 1e-2]

    # The same search on this machine's own Ray instance; it has no GPU to declare, so its trials ask for a CPU only
    # (a trial's resources decide where it runs, not what it computes).
    local, alone = tmp_path / "local", tmp_path / "local-space" / space.name
    alone.parent.mkdir()
    alone.write_text(space.read_text().replace("{cpu: 1, gpu: 1}", "{cpu: 1}"))
    searched = subprocess.run([str(BIN / "istar-tune"), "search", str(alone), "--storage-path", str(local)],
                              capture_output=True, text=True, env={**env, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert searched.returncode == 0, searched.stdout[-3000:] + searched.stderr[-3000:]
    # The same table (a trial's id hashes its resources too) and, trial by trial, the same numbers to the last bit.
    assert _table(env, "slurmgrid", results) == _table(env, "slurmgrid", local)
    def measured(trials) -> dict:
        return {r.config["learning_rate"]: {k: r.metrics[k] for k in COMPUTED} for r in trials}

    assert measured(runs) == measured(tracking.trial_runs(f"sqlite:///{local / 'mlflow.db'}", "slurmgrid"))


def test_sigterm_requeues_the_job_and_the_search_resumes_with_nothing_lost_or_duplicated(slurm, tmp_path):
    env, root = slurm
    space = tmp_path / "slurmrequeue.yaml"
    grid = "[" + ", ".join(f"{i}.0e-3" for i in range(1, 9)) + "]"
    space.write_text(SPACE.format(name="slurmrequeue", grid=grid, concurrency=1))
    results = tmp_path / "shared"
    job = _submit(env, root, space, results)
    deadline = time.monotonic() + 300
    while "[2/8]" not in _log(root, job):  # two trials finished: stop it as the time limit's signal would
        assert time.monotonic() < deadline and _job(env, job).get("JobState") in {"PENDING", "RUNNING"}, _log(root, job)
        time.sleep(0.5)
    subprocess.run(["scancel", "--batch", "--signal=TERM", job], env=env, check=True)
    state = _wait_until_ended(env, root, job)
    log = _log(root, job)
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", log[-5000:]
    first, _, second = log.partition(f"job {job} requeued (1): resuming the search")
    assert "stopping the search to requeue it" in first and "interrupted by SIGTERM" in first
    finished_first = set(re.findall(r"^\[\d+/8\] trial (\w+) done", first, re.MULTILINE))
    finished_second = set(re.findall(r"^\[\d+/8\] trial (\w+) done", second, re.MULTILINE))
    assert len(finished_first) >= 2 and len(finished_first) < 8
    assert finished_first.isdisjoint(finished_second)  # no finished trial was run again
    assert len(finished_first | finished_second) == 8
    assert "resuming slurmrequeue: it had started" in second and "8 trials, 8 finished" in second

    uri = f"sqlite:///{results / 'mlflow.db'}"
    runs = tracking.trial_runs(uri, "slurmrequeue")
    assert len(runs) == 8 and len({r.trial_id for r in runs}) == 8  # one run per trial, none twice
    client = tracking.client(uri)
    for run in runs:
        assert run.status == "finished"
        assert sorted(m.step for m in client.get_metric_history(run.run_id, "accuracy")) == [1, 2, 3]


def _documented_submissions() -> list[list[str]]:
    """The `sbatch` commands of docs/cluster.md's Slurm section."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    section = text[text.index("## On Slurm"):text.index("## On SkyPilot")]
    return [shlex.split(line.split("#")[0]) for line in section.splitlines() if line.startswith("sbatch ")]


def test_the_documented_commands_are_accepted_by_slurm_and_plan_a_search(slurm, glue_tiny):
    env, _ = slurm
    commands = _documented_submissions()
    assert len(commands) >= 2
    for argv in commands:
        at = argv.index("jobs/slurm/search.sbatch")
        options, search = argv[1:at], argv[at + 1:]
        # the documented options, then this one-node cluster's size (later options win)
        tried = subprocess.run(["sbatch", "--test-only", *options, "--nodes=1", "--gpus-per-task=2",
                                f"--cpus-per-task={os.cpu_count() or 2}", argv[at], *search],
                               capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert tried.returncode == 0 and "to start at" in tried.stderr, (argv, tried.stderr)
        planned = subprocess.run([str(BIN / "istar-tune"), "search", *search, "--dry-run"], capture_output=True,
                                 text=True, env={**env, "HF_HUB_OFFLINE": "1"}, timeout=120)
        assert planned.returncode == 0 and "configurations in" in planned.stdout, (argv, planned.stderr)
