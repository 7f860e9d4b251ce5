"""The cluster files in jobs/ cannot be launched here (no cloud, no Kubernetes): they are checked against the schemas
of the tools that read them (Ray's cluster schema, KubeRay's RayJob CRD, Ray's runtime-env validation)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from istar_tune.cli import build_parser
from istar_tune.search.spaces.file import resolve_space

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"


def test_cluster_launcher_config_is_consistent():
    cluster = yaml.safe_load((JOBS / "cluster.yaml").read_text())
    assert cluster["head_node_type"] in cluster["available_node_types"]
    workers = [t for name, t in cluster["available_node_types"].items() if name != cluster["head_node_type"]]
    assert any(t["resources"].get("GPU", 0) >= 1 for t in workers)
    assert any("mlflow server" in command for command in cluster["head_start_ray_commands"])


def test_rayjob_runs_a_valid_search_command():
    job = yaml.safe_load((JOBS / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["apiVersion"] == "ray.io/v1"
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "istar_tune"]  # the runtime env's python: its console script is not on PATH
    args = build_parser().parse_args(argv[3:])
    assert args.command == "search"
    assert all(resolve_space(space).is_file() for space in args.space)  # spaces shipped in the package
    groups = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert any(g["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu") for g in groups)


def test_runtime_env_and_submit_script():
    runtime_env = yaml.safe_load((JOBS / "runtime_env.yaml").read_text())
    assert isinstance(runtime_env["env_vars"], dict)
    script = (JOBS / "submit.sh").read_text()
    assert os.access(JOBS / "submit.sh", os.X_OK)
    assert "ray job submit" in script and "--working-dir ." in script and "istar-tune search" in script
    assert ".venv/" in (JOBS.parent / ".rayignore").read_text()


IMAGE = "rayproject/ray:2.60.0-py311-gpu"

# Field names of KubeRay's RayJob CRD, version ray.io/v1 (ray-operator/config/crd/bases/ray.io_rayjobs.yaml of
# ray-project/kuberay, commit feeaf72 of 2026-08-19): the properties of each object and, in REQUIRED, its required
# keys. The operator's API server rejects unknown fields with strict field validation.
RAYJOB_FIELDS = {
    "spec": {"activeDeadlineSeconds", "backoffLimit", "clusterSelector", "deletionStrategy", "entrypoint",
             "entrypointNumCpus", "entrypointNumGpus", "entrypointResources", "jobId", "managedBy", "metadata",
             "preRunningDeadlineSeconds", "rayClusterSpec", "runtimeEnvYAML", "shutdownAfterJobFinishes",
             "submissionMode", "submitterConfig", "submitterPodTemplate", "suspend", "ttlSecondsAfterFinished"},
    "rayClusterSpec": {"authOptions", "autoscalerOptions", "enableInTreeAutoscaling", "gcsFaultToleranceOptions",
                       "headGroupSpec", "headServiceAnnotations", "historyServerOptions", "managedBy",
                       "networkPolicy", "rayVersion", "suspend", "tlsOptions", "upgradeStrategy", "workerGroupSpecs"},
    "headGroupSpec": {"enableIngress", "headService", "ingressOptions", "labels", "rayStartParams", "resources",
                      "serviceType", "template"},
    "workerGroupSpec": {"groupName", "idleTimeoutSeconds", "labels", "maxReplicas", "minReplicas", "numOfHosts",
                        "priority", "rayStartParams", "replicas", "resources", "scaleStrategy", "suspend",
                        "template"},
    "autoscalerOptions": {"args", "command", "env", "envFrom", "idleTimeoutSeconds", "image", "imagePullPolicy",
                          "resources", "securityContext", "upscalingMode", "version", "volumeMounts"},
}
REQUIRED = {"rayClusterSpec": {"headGroupSpec"}, "headGroupSpec": {"template"},
            "workerGroupSpec": {"groupName", "maxReplicas", "minReplicas", "template"}}


def _load(name: str) -> dict:
    return yaml.safe_load((JOBS / name).read_text(encoding="utf-8"))


def _check(kind: str, value: dict) -> None:
    unknown = set(value) - RAYJOB_FIELDS[kind]
    assert not unknown, f"{kind}: fields not in the RayJob CRD: {sorted(unknown)}"
    missing = REQUIRED.get(kind, set()) - set(value)
    assert not missing, f"{kind}: required fields missing: {sorted(missing)}"


def test_cluster_yaml_validates_against_rays_cluster_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _load("cluster.yaml")
    # What `ray up` does first: fill in the provider's defaults, then check Ray's own JSON schema
    # (ray/autoscaler/ray-schema.json), which rejects unknown and misspelt fields.
    validate_config(prepare_config(config))
    assert config["docker"]["image"] == IMAGE
    assert {".venv", "istar-runs", "mlruns", "**/__pycache__"} <= set(config["rsync_exclude"])
    setup = " ".join(config["setup_commands"])
    assert "-c /home/ray/istar-tune/constraints.txt" in setup  # every node, also later ones, gets the pinned versions
    head = " ".join(config["head_start_ray_commands"])
    assert "mlflow server --backend-store-uri postgresql://" in head and "--serve-artifacts" in head
    storage = [o for o in config["docker"]["run_options"] if "ISTAR_TUNE_STORAGE_PATH=s3://" in o]
    assert len(storage) == 1  # the storage path is set in one place


def test_cluster_yaml_schema_check_catches_a_misspelt_field():
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _load("cluster.yaml")
    config["setup_comands"] = config.pop("setup_commands")
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(config))


def test_rayjob_yaml_uses_only_fields_of_the_rayjob_crd_and_autoscales():
    job = _load("rayjob.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob" and job["metadata"]["name"]
    spec = job["spec"]
    _check("spec", spec)
    cluster = spec["rayClusterSpec"]
    _check("rayClusterSpec", cluster)
    _check("headGroupSpec", cluster["headGroupSpec"])
    _check("autoscalerOptions", cluster["autoscalerOptions"])
    assert cluster["enableInTreeAutoscaling"] is True
    for group in cluster["workerGroupSpecs"]:
        _check("workerGroupSpec", group)
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    images = {c["image"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in g["template"]["spec"]["containers"]}
    assert images == {IMAGE}  # the same published image as jobs/cluster.yaml


def test_rayjob_runtime_env_is_a_valid_ray_runtime_env_that_installs_from_the_constraints():
    from ray.runtime_env import RuntimeEnv

    env = yaml.safe_load(_load("rayjob.yaml")["spec"]["runtimeEnvYAML"])
    RuntimeEnv(**env)  # Ray's validation of every field (working_dir must be a remote .zip, pip's keys)
    packages = env["pip"]["packages"]
    assert "-c ${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/constraints.txt" in packages
    assert env["env_vars"]["ISTAR_TUNE_STORAGE_PATH"].startswith("s3://")
    assert "python -m istar_tune search" in _load("rayjob.yaml")["spec"]["entrypoint"]


def _binds(command: str) -> list[str]:
    """The listen addresses a command gives (``--host``, ``--dashboard-host``, ``--node-ip-address``)."""
    words = shlex.split(command.replace(">-", ""), comments=False)
    return ([words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--host", "--dashboard-host")]
            + [w.split("=", 1)[1] for w in words if w.startswith(("--host=", "--dashboard-host="))])


def test_the_cluster_files_turn_token_auth_on_and_expose_no_service_without_it():
    cluster = _load("cluster.yaml")
    options = " ".join(cluster["docker"]["run_options"])
    assert "RAY_AUTH_MODE=token" in options  # every Ray process of every node asks for the token
    assert cluster["file_mounts"]["/home/ray/.ray/auth_token"] == "~/.ray/auth_token"  # copied, never written here
    commands = [*cluster["head_start_ray_commands"], *cluster["worker_start_ray_commands"],
                *cluster["setup_commands"], *cluster["head_setup_commands"]]
    for command in commands:
        for host in _binds(command):
            assert host == "127.0.0.1", f"{command!r} listens on {host}"  # the dashboard, Jobs API and MLflow
    head = " ".join(cluster["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "--host 127.0.0.1 --port 5000" in head
    job = _load("rayjob.yaml")
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    assert "--tracking-uri https://" in job["spec"]["entrypoint"]  # MLflow behind TLS and its basic-auth app
    head_env = {e["name"]: e for e in job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
                ["containers"][0]["env"]}
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert "value" not in head_env[name] and head_env[name]["valueFrom"]["secretKeyRef"]["name"]
    for name in ("cluster.yaml", "rayjob.yaml", "runtime_env.yaml", "submit.sh"):
        text = (JOBS / name).read_text()
        assert "0.0.0.0" not in text and "RAY_AUTH_MODE=disabled" not in text, name
        assert "PASSWORD=" not in text.replace("MLFLOW_TRACKING_PASSWORD", ""), name


def _mps_commands() -> list[str]:
    cluster = yaml.safe_load((JOBS / "cluster.yaml").read_text())
    job = yaml.safe_load((JOBS / "rayjob.yaml").read_text())
    [worker] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    return ([c for c in cluster["worker_start_ray_commands"] if "mps" in c]
            + [worker["lifecycle"]["postStart"]["exec"]["command"][-1]])


@pytest.mark.parametrize("setting", ["1", "0", None])
def test_gpu_workers_start_the_mps_daemon_unless_turned_off(tmp_path, setting):
    import subprocess

    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'called'}\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", **({"ISTAR_TUNE_MPS": setting} if setting else {})}
    commands = _mps_commands()
    assert len(commands) == 2
    for command in commands:
        assert subprocess.run(["/bin/sh", "-c", command], env=env, check=False).returncode == 0
    started = (tmp_path / "called").read_text().split() if (tmp_path / "called").exists() else []
    # cluster.yaml defaults to on; the RayJob sets the variable itself (unset there means the env entry was removed).
    assert started == {"1": ["-d", "-d"], "0": [], None: ["-d"]}[setting]


# The top-level keys of a SkyPilot task (sky/utils/schemas.py get_task_schema() of skypilot 0.14.1, which also
# accepted jobs/skypilot/search.yaml through sky.Task.from_yaml when it was written) and its storage mount modes.
SKYPILOT_TASK_KEYS = {"api_server_access", "config", "envs", "event_callback", "file_mounts", "file_mounts_mapping",
                      "inputs", "managed_secrets", "name", "num_nodes", "outputs", "pool", "resources", "run",
                      "secrets", "service", "setup", "volume_mounts", "volumes", "workdir"}
SKYPILOT_MOUNT_MODES = {"MOUNT", "COPY", "MOUNT_CACHED"}
SKYPILOT_RAY_PORT = 6380  # SkyPilot's own Ray instance on every node


def test_skypilot_task_runs_the_search_on_a_ray_of_its_own(tmp_path):
    task = yaml.safe_load((JOBS / "skypilot" / "search.yaml").read_text())
    assert set(task) <= SKYPILOT_TASK_KEYS
    assert {mount["mode"] for mount in task["file_mounts"].values()} <= SKYPILOT_MOUNT_MODES
    assert int(task["envs"]["RAY_PORT"]) != SKYPILOT_RAY_PORT
    for section in ("setup", "run"):
        script = tmp_path / f"{section}.sh"
        script.write_text(task[section])
        checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
    commands = [line.split("#")[0] for line in task["run"].replace("\\\n", " ").splitlines()]
    assert not any("ray stop" in command for command in commands)  # it would stop SkyPilot's Ray too
    search = next(c for c in commands if c.strip().startswith("istar-tune search")).split("||")[0]
    argv = shlex.split(search.replace("$SPACES", "paper_istar").replace('${args[@]+"${args[@]}"}', "")
                       .replace('${tracking[@]+"${tracking[@]}"}', ""))
    args = build_parser().parse_args(argv[1:])
    assert args.address == "127.0.0.1:$RAY_PORT" and args.resume_if_started and args.storage_path == "/results"


SITE = JOBS / "slurm" / "site.py"


def _site(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SITE), *args], capture_output=True, text=True, timeout=60)


def _site_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("slurm_site", SITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("ephemeral", [(32768, 60999), (49152, 65535), (15000, 65535), (10000, 60000)])
def test_every_jobs_port_window_lies_outside_the_ephemeral_range(ephemeral):
    site = _site_module()
    low, high = ephemeral
    starts = {site.window(job, ephemeral) for job in range(5000)}
    assert all(start + site.WINDOW <= low or start > high for start in starts)  # was 136 of every 200 job ids
    assert all(site.LOWEST <= start and start + site.WINDOW <= 65536 for start in starts) and len(starts) > 20
    with pytest.raises(SystemExit, match="leaves no 200-port window for Ray: set ISTAR_TUNE_PORT_BASE"):
        site.window(7, (1024, 65535))


def _free_window() -> int:
    """The first port of a window no process here holds, below the ephemeral range (where no client socket of a
    test running beside this one lands), as the template's windows are."""
    site = _site_module()
    low = site.ephemeral_range()[0]
    return next(b for b in range(site.LOWEST + 1000 * (os.getpid() % 10), low - site.WINDOW, site.WINDOW)
                if not site.taken(b))


def test_a_taken_port_and_a_head_no_node_owns_are_one_line_before_ray_starts():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", _free_window() + 5))
        busy.listen()
        port = busy.getsockname()[1]
        refused = _site("free", str(port - 5))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"port {port} of this job's window {port - 5}-{port + 194} is taken" in refused.stderr
    assert _site("free", str(port - 5)).returncode == 0  # let go: free again
    with socket.socket() as server:  # a connection the server side closed first: its port in TIME_WAIT
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Ray's servers (gRPC) bind theirs
        server.bind(("127.0.0.1", 0))
        server.listen()
        closing = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", closing))
        accepted, _ = server.accept()
        accepted.close()
        client.close()
    assert closing not in _site_module().taken(closing)  # as a requeued job finds its earlier run's ports
    head = _site("head", "127.0.1.1")  # Debian's /etc/hosts line for the machine's own name
    assert head.returncode == 2 and "resolves to 127.0.1.1, none of this node's own addresses" in head.stderr
    assert "set ISTAR_TUNE_HEAD_ADDRESS" in head.stderr and head.stderr.count("\n") == 1
    assert _site("head", "127.0.0.1").returncode == 0


def test_the_template_fits_real_sites_before_any_ray_starts():
    template = (JOBS / "slurm" / "search.sbatch").read_text()
    node = (JOBS / "slurm" / "on_node.sh").read_text()
    assert "#SBATCH --mem=0" in template and "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in template
    assert template.index("site.py head") < template.index("\nsrun --kill-on-bad-exit")
    assert "flock -n -E 75 9" in template
    assert node.index("site.py free") < node.index("exec ray symmetric-run")
    assert "ISTAR_TUNE_STORE_COPY_EVERY" in template and "20000 +" not in template


def test_check_site_reports_each_need_on_a_line(tmp_path):
    done = subprocess.run(["bash", str(JOBS / "slurm" / "check-site.sh"), str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines and all(line.split()[0] in ("ok", "warn", "FAIL") for line in lines), done.stdout
    assert any(line.startswith("ok") and "flock works on" in line for line in lines)
    assert any("ephemeral ports" in line for line in lines) and done.returncode == int(
        any(line.startswith("FAIL") for line in lines))


TOKEN = "ab" * 32
"""A launch's ``--secret RAY_AUTH_TOKEN=...``."""


def _skypilot_run(tmp_path, rank: int, ray_joins: bool, nodes_alive: int, token: str | None = TOKEN
                  ) -> subprocess.CompletedProcess:
    """The task's run script as SkyPilot runs it on one node, with ``ray`` and ``python`` standing in for Ray: a join
    that fails or succeeds, a head that sees ``nodes_alive`` nodes; ``ray`` writes the auth settings it was started
    with to ``ray-auth``."""
    task = yaml.safe_load((JOBS / "skypilot" / "search.yaml").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ray").write_text(f"#!/bin/sh\necho \"$RAY_AUTH_MODE ${{RAY_AUTH_TOKEN:-}}\" >> {tmp_path}/ray-auth\n"
                                 f"[ \"$1\" = start ] && exit {0 if ray_joins else 1}\nexit 0\n")
    (bin_dir / "python").write_text(f"#!/bin/sh\necho {nodes_alive}\n")
    (bin_dir / "istar-tune").write_text("#!/bin/sh\necho searched; exit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, **{k: str(v) for k, v in task["envs"].items()}, "JOIN_TIMEOUT": "0",
           "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_NODES": "2",
           "SKYPILOT_NUM_GPUS_PER_NODE": "0", "HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_AUTH_TOKEN", None)
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token  # as SkyPilot sets a secret: in the run's environment
    script = task["run"].replace("~/istar-venv/bin", str(bin_dir))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_skypilot_envs_are_all_given_and_a_node_that_cannot_join_fails_the_task(tmp_path):
    task = yaml.safe_load((JOBS / "skypilot" / "search.yaml").read_text())
    required = [name for name, value in task["envs"].items() if value in ("", None)]  # SkyPilot: must be --env'd
    assert required == []
    lost = _skypilot_run(tmp_path / "worker", rank=1, ray_joins=False, nodes_alive=0)
    assert lost.returncode == 1 and "node 1 could not join the head 10.0.0.1:6379 in 0 s" in lost.stderr
    waiting = _skypilot_run(tmp_path / "head", rank=0, ray_joins=True, nodes_alive=1)
    assert waiting.returncode == 1 and "1 of 2 nodes joined in 0 s" in waiting.stderr
    assert "searched" not in waiting.stdout
    joined = _skypilot_run(tmp_path / "all", rank=0, ray_joins=True, nodes_alive=2)
    assert joined.returncode == 0 and "searched" in joined.stdout


def test_the_skypilot_tasks_ray_asks_for_the_launchs_token_and_no_launch_goes_without_one(tmp_path):
    task = yaml.safe_load((JOBS / "skypilot" / "search.yaml").read_text())
    assert task["secrets"] == {"RAY_AUTH_TOKEN": None}  # SkyPilot resolves it at launch: never a value in the file
    for token in (None, "short"):
        refused = _skypilot_run(tmp_path / f"without-{token}", rank=0, ray_joins=True, nodes_alive=2, token=token)
        assert refused.returncode == 2 and "launch with --secret RAY_AUTH_TOKEN=" in refused.stderr
        assert not (tmp_path / f"without-{token}" / "ray-auth").exists()  # before any Ray starts
    for rank in (0, 1):
        ran = _skypilot_run(tmp_path / f"rank{rank}", rank=rank, ray_joins=True, nodes_alive=2 if rank == 0 else 0)
        assert ran.returncode == 0, ran.stderr
        assert set((tmp_path / f"rank{rank}" / "ray-auth").read_text().splitlines()) == {f"token {TOKEN}"}
    # every documented launch gives the secret (the task file's own lines and docs/cluster.md's)
    header = [line.lstrip("# ") for line in (JOBS / "skypilot" / "search.yaml").read_text().split("\nname:")[0]
              .replace("\\\n#", "").splitlines()]
    section = (JOBS.parent / "docs" / "cluster.md").read_text().split("## On SkyPilot")[1].split("\n## ")[0]
    launches = [line for line in [*header, *section.replace("\\\n", "").splitlines()]
                if line.startswith(("sky launch", "sky jobs launch"))]
    assert len(launches) == 4 and all("--secret RAY_AUTH_TOKEN=" in line for line in launches), launches


NO_FLOCK = """\
#include <errno.h>
int flock(int fd, int operation) { errno = ENOSYS; return -1; }  /* as Lustre mounted without -o flock answers */
"""


def _template_until_ray(tmp_path, **settings: str) -> subprocess.CompletedProcess:
    """jobs/slurm/search.sbatch as Slurm starts it on a job's first node, up to where its Ray would start: every
    refusal before it (this machine is the node; no Slurm is asked: the head's address is given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MLFLOW_", "RAY_"))}
    env.update(SLURM_SUBMIT_DIR=str(JOBS.parent), SLURM_JOB_ID="5", SLURMD_NODENAME="node1",
               ISTAR_TUNE_HEAD_ADDRESS="127.0.0.1", ISTAR_TUNE_RESULTS=str(tmp_path / "results"),
               ISTAR_TUNE_LOCAL=str(tmp_path / "local"), ISTAR_TUNE_VENV=str(Path(sys.executable).parents[1]),
               **settings)
    return subprocess.run(["bash", str(JOBS / "slurm" / "search.sbatch"), "smoke"], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_results_folder_without_file_locks_is_told_apart_from_another_jobs_lock(tmp_path):
    import fcntl
    import shutil

    if shutil.which("gcc") is None:  # CI's machine has one
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no C compiler (gcc) to build the flock(2) stand-in")
    (tmp_path / "no_flock.c").write_text(NO_FLOCK)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "no_flock.so"), str(tmp_path / "no_flock.c")],
                   check=True)
    unsupported = _template_until_ray(tmp_path, LD_PRELOAD=str(tmp_path / "no_flock.so"))  # the real flock(1)
    assert unsupported.returncode == 1, unsupported.stderr
    assert "does not support file locks (flock; a Lustre mount without -o flock?)" in unsupported.stderr
    assert "another job" not in unsupported.stderr
    with open(tmp_path / "results" / ".mlflow.db.lock", "w") as held:  # a job running on these results
        fcntl.flock(held, fcntl.LOCK_EX)
        contended = _template_until_ray(tmp_path)
    assert contended.returncode == 1 and "another job keeps" in contended.stderr, contended.stderr
    assert "does not support" not in contended.stderr
    assert not list((tmp_path / "results").glob(".ray-auth-token-*"))  # the job's token removed as it ends


@pytest.mark.parametrize("array, told", [
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "1",
      "SLURM_ARRAY_TASK_COUNT": "2"}, "a job array's tasks write to one MLflow server: set MLFLOW_TRACKING_URI"),
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "5",
      "SLURM_ARRAY_TASK_COUNT": "2", "MLFLOW_TRACKING_URI": "http://127.0.0.1:1"},
     "must be numbered without gaps (e.g. --array=0-26, or 0-26%4 for 4 at a time); got 2 tasks from 1 to 5"),
])
def test_an_array_the_template_cannot_shard_is_refused_in_one_line_before_anything(tmp_path, array, told):
    refused = _template_until_ray(tmp_path, **array)
    assert refused.returncode == 2 and told in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert not (tmp_path / "results").exists()  # nothing written


def _commands(text: str) -> list[str]:
    """Each command line of a text (a shell line, a YAML list item, a comment's recipe), with its backslash
    continuations joined."""
    return [line.strip(" #-`") for line in text.replace("\\\n", " ").splitlines()]


DOCUMENTS = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "SECURITY.md",
                    *(p for p in JOBS.rglob("*") if p.is_file() and p.suffix in (".yaml", ".sh", ".sbatch", ".md"))])
"""Every page and cluster file a user copies commands from."""


def test_every_mlflow_server_in_docs_and_jobs_binds_loopback_or_asks_for_a_password():
    servers = [(path.name, line) for path in DOCUMENTS for line in _commands(path.read_text(encoding="utf-8"))
               if re.search(r"\bmlflow server\b.*--", line)]
    assert len(servers) >= 2, servers  # cluster.yaml's head and the job array's shared server
    for name, line in servers:
        host = re.search(r"--host[ =](\S+)", line)
        assert host is None or host.group(1) == "127.0.0.1" or "--app-name basic-auth" in line, f"{name}: {line}"


def test_every_recipe_that_creates_a_ray_token_makes_it_readable_by_its_owner_alone(tmp_path):
    recipes = [(path.name, line) for path in DOCUMENTS for line in _commands(path.read_text(encoding="utf-8"))
               if "get-auth-token --generate" in line]
    assert recipes, "no recipe creates a token"
    for name, line in recipes:
        assert re.search(r"\(umask 077 && [^)]*get-auth-token --generate\)", line), f"{name}: {line}"
    command = re.search(r"\(umask 077 && [^)]*\)", recipes[0][1]).group()  # run as written, Ray's real command
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", command], env=env, capture_output=True, timeout=120, check=True)
    assert (tmp_path / ".ray" / "auth_token").stat().st_mode & 0o077 == 0  # without the umask: -rw-r--r--


def test_check_site_without_psutil_says_so_in_a_line_not_a_traceback(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(f"#!/bin/sh\nexec {sys.executable} -S -I \"$@\"\n")  # no site-packages: no psutil
    (venv / "python").chmod(0o755)
    assert subprocess.run([str(venv / "python"), "-c", "import psutil"], capture_output=True).returncode != 0
    done = subprocess.run(["bash", str(JOBS / "slurm" / "check-site.sh"), str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ISTAR_TUNE_VENV": str(tmp_path / "venv")})
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert any(line.startswith("warn") and "has no psutil (it comes with Ray)" in line
               for line in done.stdout.splitlines()), done.stdout


def _fake_findmnt(tmp_path) -> str:
    """A PATH whose ``findmnt`` says every folder is on Lustre mounted with localflock (no Lustre here to mount)."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "findmnt").write_text("#!/bin/sh\necho 'lustre rw,localflock,lazystatfs'\n")
    (bin_dir / "findmnt").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_check_site_names_the_placeholders_left_and_a_lustre_localflock(tmp_path):
    import shutil

    script = JOBS / "slurm" / "check-site.sh"
    done = subprocess.run(["bash", str(script), str(tmp_path / "results")], capture_output=True, text=True, timeout=60)
    for option in ("account", "partition", "qos"):  # the shipped template: placeholders, each said
        assert any(line.startswith("warn") and f"--{option}: a placeholder" in line
                   for line in done.stdout.splitlines())
    site = tmp_path / "site"
    shutil.copytree(JOBS / "slurm", site, ignore=shutil.ignore_patterns("__pycache__"))
    template = site / "search.sbatch"
    text = template.read_text().replace("##SBATCH --account=YOUR_ACCOUNT", "#SBATCH --account=YOUR_ACCOUNT")
    template.write_text(text.replace("##SBATCH --qos=YOUR_QOS", "#SBATCH --qos=gpu-normal"))
    filled = subprocess.run(["bash", str(site / "check-site.sh"), str(tmp_path / "results")], capture_output=True,
                            text=True, timeout=60)
    assert f"FAIL      --account in {template} is still YOUR_ACCOUNT: fill it in" in filled.stdout, filled.stdout
    assert "ok        --qos: gpu-normal" in filled.stdout and filled.returncode == 1
    lustre = subprocess.run(["bash", str(script), str(tmp_path / "results")], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PATH": _fake_findmnt(tmp_path)})
    assert any(line.startswith("FAIL") and "Lustre with localflock: flock holds on one node only" in line
               for line in lustre.stdout.splitlines()), lustre.stdout
    assert not any("flock works on" in line for line in lustre.stdout.splitlines())


def test_the_template_refuses_a_store_on_lustre_with_localflock(tmp_path):
    done = _template_until_ray(tmp_path, PATH=_fake_findmnt(tmp_path))
    assert done.returncode == 1
    assert "is a Lustre mount with localflock (locks hold on one node only)" in done.stderr, done.stderr
    assert not list((tmp_path / "results").glob(".ray-auth-token-*"))


@pytest.mark.parametrize(("setting", "value", "said"), [
    ("ISTAR_TUNE_START_WAIT", "10m", "ISTAR_TUNE_START_WAIT must be a whole number of seconds, got '10m'"),
    ("ISTAR_TUNE_MAX_REQUEUES", "-1", "ISTAR_TUNE_MAX_REQUEUES must be a whole number of requeues, got '-1'"),
])
def test_a_deadline_or_requeue_bound_that_is_no_number_is_refused_before_anything(tmp_path, setting, value, said):
    done = _template_until_ray(tmp_path, **{setting: value})
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not list((tmp_path / "results").glob(".ray-auth-token-*"))
