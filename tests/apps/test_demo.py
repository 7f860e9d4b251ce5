from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.tracking.storage import default_tracking_uri

pytestmark = pytest.mark.slow


@pytest.fixture
def ray_env(monkeypatch):
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    yield
    ray.shutdown()


def _table(lines: list[str], title: str) -> list[list[str]]:
    start = lines.index(title) + 3  # title, header, rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_demo_smoke_prints_the_tables_mlflow_holds(glue, ray_env, tmp_path, capsys):
    storage = tmp_path / "istar-runs"
    assert main(["demo", "--smoke", "--data-dir", str(glue), "--storage-path", str(storage)]) == 0
    lines = capsys.readouterr().out.splitlines()
    uri = default_tracking_uri(storage)
    runs = tracking.trial_runs(uri, "demo-smoke")
    assert len(runs) == 6 and all(r.status == "finished" for r in runs)  # base × 2 lr, istar × 2 lr × 2 λ

    best_rows = _table(lines, "Best configuration per method (demo-smoke, from MLflow):")
    assert [row[2] for row in best_rows] == ["base", "istar"]
    for row in best_rows:
        group = [r for r in runs if r.method == row[2]]
        best = max(group, key=lambda r: r.metrics["accuracy"])
        assert float(row[3]) == pytest.approx(best.metrics["accuracy"], abs=5e-5)
        assert int(row[7]) == len(group)

    lambda_rows = _table(lines, "Eval IsoScore* (ζ = 0.2, all-layer token cloud) against accuracy per λ:")
    assert [(row[0], row[1]) for row in lambda_rows] == [("Base", "—"), ("I-STAR", "-1"), ("I-STAR", "1")]
    for row in lambda_rows[1:]:
        group = [r for r in runs if r.method == "istar" and r.config["lam"] == float(row[1])]
        mean_iso = sum(r.metrics["eval_isoscore_star"] for r in group) / len(group)
        assert float(row[5]) == pytest.approx(mean_iso, abs=5e-5)
    # The direction of the paper's Figure 3 holds even on 128 examples: λ = +1 is more isotropic than λ = −1.
    assert float(lambda_rows[2][5]) > float(lambda_rows[1][5])
    reading = lines.index(next(line for line in lines if line.startswith("How to read it:")))
    assert reading > lines.index("Eval IsoScore* (ζ = 0.2, all-layer token cloud) against accuracy per λ:")
    assert "not that I-STAR hurts" in " ".join(lines[reading:reading + 6])  # the λ table says what it means
    ui = [line for line in lines if "mlflow ui --backend-store-uri" in line]
    assert ui and uri in ui[0]

    # Running it again reuses every finished trial: no new runs.
    assert main(["demo", "--smoke", "--data-dir", str(glue), "--storage-path", str(storage)]) == 0
    assert len(tracking.trial_runs(uri, "demo-smoke")) == 6


def test_demo_without_data_or_hub_names_both_options(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["demo", "--storage-path", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--data-dir" in err and "GLUE_DIR" in err and "\n" not in err
    assert not (tmp_path / "runs").exists()


def test_an_interrupted_demo_exits_130_says_how_to_go_on_and_prints_no_tables(glue, tmp_path):
    """Ctrl-C in a terminal signals the demo's whole process group after its first trial ended."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update(RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    command = [str(Path(sys.executable).with_name("istar-tune")), "demo", "--smoke", "--data-dir", str(glue),
               "--storage-path", str(tmp_path / "istar-runs")]
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tmp_path, start_new_session=True)
    output = []
    for line in demo.stdout:
        output.append(line)
        if line.startswith("[1/"):
            os.killpg(demo.pid, signal.SIGINT)
            break
    rest, _ = demo.communicate(timeout=300)
    text = "".join(output) + rest
    assert demo.returncode == 130, text[-3000:]
    assert re.search(r"INTERRUPTED \(interrupted by SIGINT[^)]*\)\): \d+ of 6 trials did not finish; continue with "
                     r"--resume", text), text[-3000:]
    assert "Best configuration per method" not in text and "| method |" not in text and "Traceback" not in text
