"""Hyperband and median stopping searched for real: a short tiny-bert grid under each, from the command line (dry run,
then the search), two trials at a time (one CPU each) so trials wait for a worker: Hyperband stops trials in its
brackets, and median stopping pauses the trials it cannot judge yet (Tune saves them and resumes them from their
checkpoint). Every configuration ends with one MLflow run, finished or stopped early, whose epochs are those it
trained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.tracking.storage import tracking_uri

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent / "istar-tune"


def _search(root: Path, glue: Path, space_yaml, name: str, scheduler: dict,
            rates: list[float]) -> tuple[str, str, list]:
    (root / f"{name}.yaml").write_text(space_yaml(
        name=name, tasks=["sst2"], hyperparameters={"epochs": 3, "learning_rate": {"grid": rates}}, scheduler=scheduler,
        resources={"cpu": 1}, settings={"eval_batch_size": 128, "max_train_samples": 320, "checkpoint": "resume",
                                        "shrinkage_tokens": None}))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "GLUE_DIR")}
    env = {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    command = [str(BIN), "search", f"{name}.yaml", "--data-dir", str(glue), "--storage-path", "runs"]
    dry = subprocess.run([*command, "--dry-run"], cwd=root, capture_output=True, text=True, env=env, timeout=300)
    assert dry.returncode == 0, dry.stderr
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = tracking.trial_runs(tracking_uri(None, str(root / "runs")), name)
    return dry.stdout, done.stdout, runs


def _check(runs: list, rates: list[float]) -> None:
    assert sorted(r.config["learning_rate"] for r in runs) == rates  # one run a configuration
    assert {r.status for r in runs} <= {"finished", "stopped_early"}
    for run in runs:  # a finished run trained its 3 epochs; one stopped early, fewer
        assert run.metrics["epoch"] == 3 if run.status == "finished" else 1 <= run.metrics["epoch"] < 3


def test_hyperband_searches_a_real_grid(glue, tmp_path, space_yaml):
    rates = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
    dry, out, runs = _search(tmp_path, glue, space_yaml, "bands",
                             {"type": "hyperband", "grace_period": 1, "reduction_factor": 2}, rates)
    assert "scheduler hyperband (grace 1, η 2)" in dry
    _check(runs, rates)
    assert any(r.status == "stopped_early" for r in runs), out[-2000:]


def test_median_stopping_pauses_and_stops_a_real_grid(glue, tmp_path, space_yaml):
    rates = [1e-5, 1e-4, 1e-3, 5e-3]
    dry, out, runs = _search(tmp_path, glue, space_yaml, "medians", {"type": "median", "grace_period": 1}, rates)
    assert "scheduler median (grace 1)" in dry
    _check(runs, rates)
    assert " started again: " in out  # paused for want of others to judge against, and resumed from its checkpoint
