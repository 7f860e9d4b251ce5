"""A finished grid exported as learning curves: the long table holds MLflow's per-epoch records exactly, its
configurations numbered the same on every task; Syne Tune's own loader (``syne-tune`` installed beside the project,
in a folder of its own, from the package registry) reads the blackbox export back to the same numbers."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.replay.export import OBJECTIVES, export_grid, grid_curves
from istar_tune.replay.reading import grid_runs
from istar_tune.testing import built_tools, tool_pins

pytestmark = pytest.mark.slow
SYNETUNE = tool_pins("synetune")
"""Syne Tune's blackbox repository and the parquet engine its files are written with (syne-tune's own other
dependencies are the project's, or not imported by the repository: it is installed without them)."""
LOAD = """\
import json, sys
from syne_tune.blackbox_repository.blackbox_tabular import deserialize
boxes = deserialize(sys.argv[1])
print(json.dumps({task: {"hyperparameters": box.hyperparameters.to_dict("records"),
                         "objectives": box.objectives_names, "fidelities": box.fidelity_values.tolist(),
                         "values": box.objectives_evaluations[:, 0].tolist()} for task, box in boxes.items()}))
"""


def test_the_long_table_is_mlflows_records_and_numbers_configurations_in_the_tables_order(rehearsal, tmp_path):
    _, uri = rehearsal
    runs = grid_runs(uri, "landscape", simulated=True)
    client = tracking.client(uri)
    table = grid_curves(runs, client)
    assert table.groupby(["method", "configuration"]).ngroups == len(runs) == 18
    for run in runs:
        rows = table[(table.method == run.method) & (table.learning_rate == run.config["learning_rate"])
                     & (table.epochs == run.config["epochs"])
                     & ((table.lam == run.config.get("lam")) if run.method == "istar" else True)]
        history = sorted(client.get_metric_history(run.run_id, "accuracy"), key=lambda m: m.step)
        assert rows.epoch.tolist() == [m.step for m in history] == list(range(1, run.config["epochs"] + 1))
        assert rows.dev_score.tolist() == [m.value for m in history] and rows.configuration.nunique() == 1
        times = [m.value for m in sorted(client.get_metric_history(run.run_id, "epoch_time_s"), key=lambda m: m.step)]
        assert rows.elapsed_s.tolist() == pytest.approx([sum(times[:k]) for k in range(1, len(times) + 1)])
    base = table[table.method == "base"].drop_duplicates("configuration")
    assert base.configuration.tolist() == list(range(6))  # numbered from 0 within the model × method
    assert export_grid(uri, "landscape", "curves", tmp_path / "curves.csv", simulated=True).startswith("wrote ")
    read = pd.read_csv(tmp_path / "curves.csv")
    assert read.shape == table.shape and read.dev_score.tolist() == table.dev_score.tolist()
    assert main(["export", "--tracking-uri", uri, "--experiment", "landscape-seeds", "--format", "curves",
                 "--output", str(tmp_path / "seeds.parquet"), "--simulated"]) == 2  # a seeds stage is no grid


@pytest.fixture(scope="module")
def synetune(tmp_path_factory) -> Path:
    """A folder holding Syne Tune's blackbox repository, for ``PYTHONPATH``: ``make tool-envs``'s, else one
    installed here from the package registry."""
    if (built := built_tools()) is not None:
        return built / "synetune"
    folder = tmp_path_factory.mktemp("synetune")
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                                str(folder), *SYNETUNE], capture_output=True, text=True, timeout=900)
    if installed.returncode != 0:
        why = f"{' '.join(SYNETUNE)} did not install from the package registry: {installed.stderr.strip()[-500:]}"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    return folder


def test_syne_tunes_loader_reads_the_blackboxes_back_to_the_long_tables_numbers(rehearsal, synetune, tmp_path):
    _, uri = rehearsal
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(synetune), *sys.path])}
    out = tmp_path / "blackboxes"
    exported = subprocess.run([sys.executable, "-m", "istar_tune", "export", "--tracking-uri", uri, "--experiment",
                               "landscape", "--format", "synetune", "--output", str(out), "--simulated"],
                              capture_output=True, text=True, env=env, timeout=300)
    assert exported.returncode == 0, exported.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bert-base", "bert-istar"]
    metadata = json.loads((out / "bert-istar" / "metadata.json").read_text())
    assert metadata["tool"] == "istar-tune" and metadata["model"] == "bert" and metadata["metrics"] == {
        "rte": "accuracy"} and metadata["task_names"] == ["rte"]
    table = grid_curves(grid_runs(uri, "landscape", simulated=True), tracking.client(uri))
    for name, method in (("bert-base", "base"), ("bert-istar", "istar")):
        loaded = subprocess.run([sys.executable, "-c", LOAD, str(out / name)], capture_output=True, text=True,
                                env=env, timeout=300)
        assert loaded.returncode == 0, loaded.stderr
        box = json.loads(loaded.stdout)["rte"]
        assert box["objectives"] == list(OBJECTIVES) and box["fidelities"] == [1, 2, 3]
        rows = table[table.method == method]
        assert len(box["hyperparameters"]) == rows.configuration.nunique()
        for row in rows.itertuples(index=False):
            config = box["hyperparameters"][row.configuration]
            assert (config["learning_rate"], config["epochs"]) == (row.learning_rate, row.epochs)
            stored = box["values"][row.configuration][row.epoch - 1]
            assert stored[0] == pytest.approx(row.dev_score, rel=1e-6)  # Syne Tune keeps float32
        for configuration, values in enumerate(box["values"]):  # past a configuration's own epochs: nothing
            epochs = box["hyperparameters"][configuration]["epochs"]
            assert all(math.isnan(v) for epoch in values[epochs:] for v in epoch)


WIDE = """\
name: wide
models: [bert]
tasks: [rte]
methods: [istar]
hyperparameters:
  batch_size: 32
  epochs: {grid: [1, 2, 3, 4]}
  learning_rate: {grid: [1.0e-5, 2.0e-5, 3.0e-5, 5.0e-5]}
method_hyperparameters:
  istar: {lam: {grid: [-1, 1, 3]}, zeta: 0.2}
resources: {cpu: 1}
settings: {recipe: paper, checkpoint: resume}
"""
"""48 configurations sharing 12 trials of 4 epochs: rungs at epochs 1 and 2 at grace 1, η 2."""
ROOT = Path(__file__).resolve().parents[2]
SIMULATE = """\
import json, sys
from benchmarks.bench_synetune import simulate
print(json.dumps(simulate(sys.argv[1], "rte", "dev_score", int(sys.argv[2]), 1, 2.0, json.loads(sys.argv[3]))))
"""
"""Syne Tune's ASHA simulated on an exported blackbox (``benchmarks/bench_synetune.py``), at grace 1 and η 2."""


def _bench_synetune():
    """``benchmarks/bench_synetune.py``, loaded from its file (its rung rule needs no Syne Tune)."""
    spec = importlib.util.spec_from_file_location("bench_synetune", ROOT / "benchmarks" / "bench_synetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_syne_tunes_asha_simulated_on_the_export_is_the_replays_worker_model_with_syne_tunes_rung_rule(
        local_ray, synetune, tmp_path):
    """Syne Tune's own simulator (``UserBlackboxBackend``, its ASHA) on the exported blackbox, the grid's 12 trials
    started in the replay's orders on 1 and 4 workers: each trial's epochs are those of the replay's worker model
    driven by Syne Tune's rung rule (written out from its source in ``benchmarks/bench_synetune.py``); the replay's
    ASHA (Ray's rule) differs by that rule alone (docs/searching.md)."""
    from istar_tune.replay import schedulers
    from istar_tune.replay.curves import arms
    from istar_tune.replay.reading import read_grid
    from istar_tune.search.run import run_searches
    from istar_tune.search.schedulers import Rule
    from istar_tune.search.schedulers.asha import ASHA
    from istar_tune.search.spaces.file import load_search_space
    from istar_tune.search.tune.simulate import Simulation

    bench = _bench_synetune()
    (tmp_path / "wide.yaml").write_text(WIDE)
    summary = run_searches([load_search_space(tmp_path / "wide.yaml")], storage_path=tmp_path / "runs",
                           write=lambda _: None, simulation=Simulation(time_factor=0.0005))[0]
    uri = summary.tracking_uri
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(synetune), *sys.path]),
           "SYNETUNE_FOLDER": str(tmp_path / "syne-tune")}
    exported = subprocess.run([sys.executable, "-m", "istar_tune", "export", "--tracking-uri", uri, "--experiment",
                               "wide", "--format", "synetune", "--output", str(tmp_path / "boxes"), "--simulated"],
                              capture_output=True, text=True, env=env, timeout=300)
    assert exported.returncode == 0, exported.stderr
    unit = read_grid(uri, "wide", simulated=True)[0]
    indices = list(arms(unit.curves))
    curves = [unit.curves[i] for i in indices]
    rng = np.random.default_rng(3)
    orders = [[int(i) for i in rng.permutation(len(curves))] for _ in range(6)]
    differ = 0
    for workers in (1, 4):
        keys = [[{k: curves[i].config[k] for k in ("learning_rate", "lam")} for i in order] for order in orders]
        simulated = subprocess.run([sys.executable, "-c", SIMULATE, str(tmp_path / "boxes" / "bert-istar"),
                                    str(workers), json.dumps(keys)],
                                   capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert simulated.returncode == 0, simulated.stderr[-3000:]
        for order, epochs in zip(orders, json.loads(simulated.stdout.strip().splitlines()[-1]), strict=True):
            rule = bench.SyneTuneRung(1, 2, 4)  # Syne Tune's trial t is the configuration order[t]
            schedulers.run_workers(curves, order, workers, rule)
            assert [rule.trained[i] for i in order] == epochs, (workers, order)
            ray = schedulers.driven(curves, Fixed(order), lambda: ASHA.build(Rule("asha", 4, 1, 2.0)), workers)
            differ += ray.epochs_trained != sum(epochs)
    assert differ > 0  # the rules differ on this grid: Ray's quantile is the stricter where one trial is recorded


class Fixed:
    """A generator whose permutation is given."""

    def __init__(self, order):
        self.order = order

    def permutation(self, n):
        return np.array(self.order)

    def integers(self, high):
        return 0
