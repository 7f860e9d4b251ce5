"""A search backend of one's own: one file that registers it, then a search that names it (a rehearsal: Ray Tune
schedules every trial and MLflow records it; a synthetic landscape stands in for training)."""

from __future__ import annotations

import importlib.util

import pytest

from istar_tune import tracking
from istar_tune.search import backends
from istar_tune.search.run import run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation

pytestmark = pytest.mark.slow

BACKEND_FILE = '''\
import optuna

from istar_tune.search.backends import Backend, register

OPTUNA_RANDOM = register(Backend(name="optuna-random", kinds=("choice", "uniform", "loguniform", "randint"),
                                 enumerates=False, summary="Optuna's random sampler, a study per group",
                                 sampler=lambda seed: optuna.samplers.RandomSampler(seed=seed)))
'''

SPACE = """\
name: own-backend
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
  batch_size: 16
  epochs: 2
  learning_rate: {loguniform: [1.0e-5, 5.0e-5]}
search: {algorithm: optuna-random, num_samples: 3, seed: 0}
resources: {cpu: 1}
settings: {checkpoint: resume}
"""


@pytest.fixture
def registry():
    """The registry as it was, after the test."""
    before = dict(backends.BACKENDS)
    yield backends.BACKENDS
    backends.BACKENDS.clear()
    backends.BACKENDS.update(before)


def test_a_backend_registered_from_one_file_runs_a_search(tmp_path, registry, local_ray):
    (tmp_path / "my_backend.py").write_text(BACKEND_FILE)
    spec = importlib.util.spec_from_file_location("my_backend", tmp_path / "my_backend.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert "optuna-random" in registry
    (tmp_path / "space.yaml").write_text(SPACE)
    space = load_search_space(tmp_path / "space.yaml")
    assert space.algorithm == "optuna-random" and space.trials_in(space.groups()[0]) == 3
    summary, = run_searches([space], storage_path=tmp_path / "runs", write=lambda _: None,
                            simulation=Simulation(time_factor=0.0005))
    runs = tracking.trial_runs(summary.tracking_uri, "own-backend", simulated=True)
    rates = sorted(r.config["learning_rate"] for r in runs)
    assert len(runs) == 3 and all(r.status == "finished" for r in runs)
    assert len(set(rates)) == 3 and all(1e-5 <= rate <= 5e-5 for rate in rates)


def test_a_space_naming_a_backend_nobody_registered_is_refused_with_the_choices(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE.replace("algorithm: optuna-random", "algorithm: hebo"))
    with pytest.raises(Exception, match="search.algorithm: must be one of grid, random, tpe, qmc, got 'hebo'"):
        load_search_space(tmp_path / "space.yaml")
