"""The prepared device check runs on a CPU (tiny-bert, glue-tiny): every figure a CPU can give, what needs CUDA listed
as skipped (``python -m benchmarks.device``, as the device call runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.smoke  # run by `make smoke-image-device`, in the GPU image's versions
def test_the_device_check_runs_on_a_cpu_and_lists_what_it_skipped(glue_tiny, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.device", "--out", str(tmp_path),
                           "--model", "tiny-bert", "--data-dir", str(glue_tiny), "--steps", "2",
                           "--train-samples-small", "32", "--search-train-samples", "64", "--budget-s", "300"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "device_check.json").read_text())
    sections = results["sections"]
    assert set(sections) == {"profile", "reference", "modes", "fused", "epoch", "memory", "step", "shapes",
                             "determinism", "calibrate"} and not results["errors"]
    reference = json.loads((tmp_path / "search_reference.json").read_text())  # what the second call compares with
    assert sorted(reference) == ["base@2e-05", "base@5e-05", "istar@2e-05", "istar@5e-05"]
    assert all(r["epoch"] == 1 and r["train_loss"] > 0 for r in reference.values())
    assert [(r["step_mode"], r["precision"], r["batch_size"]) for r in sections["modes"]["rows"]] == [
        ("eager", "fp32", 8)] and sections["modes"]["rows"][0]["share_of_matmul_rate"] > 0
    fused = sections["fused"]["rows"]  # the bundle's tokens/s: K members × one stream's
    assert [(r["members"], r["batch_size"], r["failed"]) for r in fused] == [(1, 8, 0), (2, 8, 0)]
    assert all(r["tokens_per_s"] > 0 and r["share_of_matmul_rate"] > 0 and r["losses_finite"] for r in fused)
    profiled = sections["profile"]["rows"]
    assert [(r["method"], r["batch"]) for r in profiled] == [("base", 8), ("base", 32), ("istar", 8), ("istar", 32)]
    assert all(r["host_ms_per_step"] > 0 and r["gpu_busy_ms_per_step"] is None and r["top_host_ops"]
               for r in profiled)
    assert [(r["precision"], r["loss_finite"]) for r in sections["epoch"]["runs"]] == [("bf16", True),
                                                                                       ("fp32", True)]
    assert all(r["train_tokens_per_s"] > 0 and r["mfu_vs_measured_matmul"] > 0 for r in sections["epoch"]["runs"])
    assert len(sections["memory"]["rows"]) == 6 and all(r["estimate_gb"] > 0 for r in sections["memory"]["rows"])
    assert sections["step"]["istar_over_base"] > 0
    assert [r["attention"] for r in sections["shapes"]["rows"]] == ["sdpa", "eager"]
    assert all(r["first_seen_ms_median"] > 0 and r["seen_ms_median"] > 0 for r in sections["shapes"]["rows"])
    for variant in ("deterministic", "default"):  # a CPU's kernels are deterministic: both exact
        assert sections["determinism"][variant]["resume"]["equal"]
        assert sections["determinism"][variant]["shared_prefix"]["equal"]
    assert [r["packing"] for r in sections["calibrate"]["rows"]] == [1, 2]
    skipped = " ".join(s["what"] for s in results["skipped"])
    assert "oom" in skipped and "measured peaks" in skipped and "MPS" in skipped and "GPU busy time" in skipped
    assert "modes: graphs and compile" in skipped and "determinism: graphs = eager bit for bit" in skipped
    summary = (tmp_path / "device_check.md").read_text()
    assert "## (0) Where a step's time goes" in summary and "## (e) Determinism" in summary
    assert "## (g) A new sequence length" in summary and "Skipped: oom" in summary
    assert "## (j) Fused trials" in summary and "fused: K = 4, 8, 16 at bf16" in skipped
    assert "## (h) Step modes" in summary and "## (i) The second call's configurations" in summary


def test_the_comparison_of_two_records_leaves_the_machines_figures_out(benchmark_module):
    check = benchmark_module("device.common")
    a = {"epoch": 2, "accuracy": 0.5, "train_loss": 0.69, "train_time_s": 1.0}
    assert check.compare(a, {**a, "train_time_s": 9.0})["equal"]
    differs = check.compare(a, {**a, "train_loss": 0.7})
    assert not differs["equal"] and differs["differing"] == ["train_loss"]
    assert differs["largest_gap"] == pytest.approx(0.01)
