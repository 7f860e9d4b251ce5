"""The smoke subset that `make smoke-lowest` and `make smoke-image` run in the versions clusters run (the lowest the
project declares; the GPU image's): the Python API, one tiny-bert `train`, a two-trial search tracked in MLflow and
its table, each as a user types it. `make test` leaves it out: its commands are run there by the docs tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.smoke
ROOT = Path(__file__).resolve().parents[1]


def _istar_tune(*argv: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "istar_tune", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (f"istar-tune {' '.join(argv)} exits {done.returncode}:\n{done.stdout[-2000:]}\n"
                                  f"{done.stderr[-2000:]}")
    return done.stdout


def test_the_api_a_train_a_two_trial_search_and_its_table_run_in_these_versions(glue_tiny, tmp_path):
    import istar_tune

    assert {"train", "run_search", "build_table", "Hyperparameters"} <= set(istar_tune.__all__)
    env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")},
           "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    trained = _istar_tune("train", "--model", "tiny-bert", "--task", "rte", "--data-dir", str(glue_tiny),
                          "--epochs", "1", "--no-progress", cwd=tmp_path, env=env)
    assert "accuracy" in trained
    searched = _istar_tune("search", str(ROOT / "search_spaces" / "smoke.yaml"), "--tasks", "rte", "--methods",
                           "base", "--name", "versions", "--data-dir", str(glue_tiny), "--storage-path",
                           str(tmp_path / "runs"), cwd=tmp_path, env=env)
    assert re.search(r"search versions: (\d+) trials?, \1 finished, 0 stopped early, 0 failed", searched), searched
    table = _istar_tune("table", "--experiment", "versions", "--storage-path", str(tmp_path / "runs"), cwd=tmp_path,
                        env=env)
    rows = [line for line in table.splitlines() if line.startswith("| tiny-bert")]
    assert len(rows) == 1 and "| rte |" in rows[0] and "| base |" in rows[0]
