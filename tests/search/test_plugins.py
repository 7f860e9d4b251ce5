"""Strategies from an installed distribution's entry points (group ``istar_tune.strategies``): a throwaway
distribution on the path, named by a search space, run from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.search import backends, plugins, schedulers

MODULE = '''\
import optuna
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from istar_tune.search.backends import Backend
from istar_tune.search.schedulers import Scheduler

HALTON = Backend(name="halton", kinds=("loguniform", "uniform"), enumerates=False, summary="Halton points",
                 sampler=lambda seed: optuna.samplers.QMCSampler(qmc_type="halton", seed=seed))


class OneEpoch(FIFOScheduler):
    def on_trial_result(self, tune_controller, trial, result):
        return TrialScheduler.STOP


def one_epoch():
    return Scheduler(name="one-epoch", summary="every trial stopped after its first epoch",
                     build=lambda rule: OneEpoch())
'''

SPACE = """\
name: plugged
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
  batch_size: 16
  epochs: 3
  learning_rate: {loguniform: [1.0e-5, 5.0e-5]}
search: {algorithm: halton, num_samples: 3, seed: 0}
scheduler: {type: one-epoch}
resources: {cpu: 1}
settings: {checkpoint: resume}
"""


def _distribution(folder: Path, entry_points: str) -> Path:
    """A throwaway installed distribution: a module and its dist-info (metadata and entry points) in ``folder``."""
    (folder / "my_strategies.py").write_text(MODULE)
    info = folder / "my_strategies-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-strategies\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.GROUP}]\n{entry_points}")
    return folder


@pytest.fixture
def registries():
    before = dict(backends.BACKENDS), dict(schedulers.SCHEDULERS), dict(plugins._loaded)
    yield
    for registry, saved in zip((backends.BACKENDS, schedulers.SCHEDULERS, plugins._loaded), before):
        registry.clear()
        registry.update(saved)


def test_entry_points_register_a_backend_and_a_scheduler(tmp_path, monkeypatch, registries):
    site = _distribution(tmp_path, "halton = my_strategies:HALTON\none-epoch = my_strategies:one_epoch\n")
    monkeypatch.syspath_prepend(str(site))
    assert "halton" in backends.registered() and "one-epoch" in schedulers.registered()
    assert backends.get_backend("halton").keeps_studies and schedulers.get_scheduler("one-epoch").build


def test_an_entry_point_that_is_not_a_strategy_is_refused_naming_it(tmp_path, monkeypatch, registries):
    site = _distribution(tmp_path, "broken = my_strategies:MISSING\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ConfigError, match=r"entry point 'broken' \(my_strategies:MISSING\) of istar_tune.strategies "
                                          r"in my-strategies 0.1 failed to load: AttributeError"):
        backends.registered()


def test_an_entry_point_naming_something_else_is_refused(tmp_path, monkeypatch, registries):
    site = _distribution(tmp_path, "odd = my_strategies:OneEpoch\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ConfigError, match=r"entry point 'odd' .* is a type: it must be a Backend"):
        schedulers.registered()


@pytest.mark.slow
def test_a_space_names_an_installed_strategy_on_the_command_line(tmp_path):
    (tmp_path / "site").mkdir()
    site = _distribution(tmp_path / "site", "halton = my_strategies:HALTON\none-epoch = my_strategies:one_epoch\n")
    (tmp_path / "space.yaml").write_text(SPACE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "RAY_AUTH_MODE": "disabled"}
    command = [sys.executable, "-m", "istar_tune", "search", str(tmp_path / "space.yaml")]
    dry = subprocess.run([*command, "--dry-run"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "algorithm halton (Halton points), scheduler one-epoch" in dry.stdout
    run = subprocess.run([*command, "--simulate", "--time-factor", "0.0005", "--storage-path", str(tmp_path / "runs")],
                         env=env, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    runs = tracking.trial_runs(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}", "plugged", simulated=True)
    assert len(runs) == 3 and len({r.config["learning_rate"] for r in runs}) == 3
    assert all(r.status == "stopped_early" and r.metrics["epoch"] == 1 for r in runs), [(r.status, r.metrics)
                                                                                      for r in runs]
