"""A rehearsal's grid (a synthetic landscape, ``--simulate``) and the seeds stage that re-ran its choice, in one
MLflow store, shared by the replay's tests."""

from __future__ import annotations

import pytest

from istar_tune.search.run import run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation

GRID = """\
name: landscape
models: [bert]
tasks: [rte]
methods: [base, istar]
hyperparameters:
  batch_size: 32
  epochs: {grid: [1, 2, 3]}
  learning_rate: {grid: [1.0e-5, 3.0e-5]}
method_hyperparameters:
  istar: {lam: {grid: [-1, 1]}, zeta: 0.2}
resources: {cpu: 1}
settings: {recipe: paper, checkpoint: resume}
"""
SEEDS = """\
name: landscape-seeds
stage: seeds
best_of: [landscape]
seeds: [1, 2, 3]
models: [bert]
tasks: [rte]
methods: [base, istar]
resources: {cpu: 1}
settings: {recipe: paper, checkpoint: resume}
"""


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, local_ray):
    """The landscape's grid and its seeds stage, simulated, in one store."""
    folder = tmp_path_factory.mktemp("replay")
    (folder / "grid.yaml").write_text(GRID)
    (folder / "seeds.yaml").write_text(SEEDS)
    summaries = run_searches([load_search_space(folder / "grid.yaml"), load_search_space(folder / "seeds.yaml")],
                             storage_path=folder / "runs", write=lambda _: None,
                             simulation=Simulation(time_factor=0.0005))
    assert not any(s.failed for s in summaries)
    return folder, summaries[0].tracking_uri




@pytest.fixture
def grid_text():
    return GRID
