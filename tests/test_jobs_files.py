"""The cluster files in jobs/ cannot be launched here (no cloud, no Kubernetes): check what can be checked."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import yaml

from istar_tune.cli import build_parser

JOBS = Path(__file__).resolve().parents[1] / "jobs"


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
    assert argv[0] == "istar-tune"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "search" and (JOBS.parent / args.space).is_file()
    groups = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert any(g["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu") for g in groups)


def test_runtime_env_and_submit_script():
    runtime_env = yaml.safe_load((JOBS / "runtime_env.yaml").read_text())
    assert isinstance(runtime_env["env_vars"], dict)
    script = (JOBS / "submit.sh").read_text()
    assert os.access(JOBS / "submit.sh", os.X_OK)
    assert "ray job submit" in script and "--working-dir ." in script and "istar-tune search" in script
    assert ".venv/" in (JOBS.parent / ".rayignore").read_text()
