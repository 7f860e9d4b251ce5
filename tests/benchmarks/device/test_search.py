"""The device check's second call rehearsed on a CPU: a real grid search (Ray with one logical GPU, four trials at
``gpu: 0.25``, MLflow on SQLite) against the same configurations trained one by one — every run and the best table
equal to the bit; and a reference that differs in one loss is found out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_search_on_the_device_equals_its_configurations_trained_one_by_one(glue_tiny, tmp_path,
                                                                              benchmark_module):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.device.search", "--out", str(tmp_path), "--model",
                           "tiny-bert", "--data-dir", str(glue_tiny), "--logical-gpus", "1", "--train-samples", "96"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "training the 4 configurations one by one first" in done.stdout
    results = json.loads((tmp_path / "device_search.json").read_text())
    assert results["equal"] and results["gpu_per_trial"] == 0.25
    assert [r["configuration"] for r in results["runs"]] == ["base@2e-05", "base@5e-05", "istar@2e-05", "istar@5e-05"]
    assert all(r["status"] == "finished" and r["keys_compared"] >= 5 for r in results["runs"])
    assert [r["method"] for r in results["best"]] == ["base", "istar"] and all(r["equal"] for r in results["best"])
    summary = (tmp_path / "device_search.md").read_text()
    assert "Every run and the best table equal to the reference: **True**" in summary

    search = benchmark_module("device.search")  # a reference that differs in one loss is found out
    reference = {}
    for name in ("base@2e-05", "base@5e-05", "istar@2e-05", "istar@5e-05"):
        learning_rate = float(name.split("@")[1])
        runs = search.compare_runs(results["tracking_uri"], {name: {"train_loss": 1.0, "accuracy": 0.0}})
        assert not runs[0]["equal"] and "train_loss" in runs[0]["differing"], runs
        reference[name] = {"train_loss": 1.0, "accuracy": 1.0 if learning_rate == 5e-5 else 0.0}
    chosen = {r["method"]: r for r in search.compare_best(results["tracking_uri"], reference)}
    assert chosen["base"]["reference_best"] == ["base@5e-05"] and not chosen["base"]["equal"]
