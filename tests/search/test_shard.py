"""A job array's shards: the (model, task) pairs dealt round-robin, each shard's spaces narrowed to its pairs (a seeds
stage to the same pairs as its grid), a shipped task and one's own alike; shards run one after another into one
store fill one table and one status, each with its own parent run and results folder, and a shard run again
runs nothing twice."""

from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.results.status import search_status
from istar_tune.results.tables import build_table
from istar_tune.search.run import run_searches
from istar_tune.search.shard import Shard, pairs_of, parse_shard, take_shard
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation

GRID = """\
name: {name}
models: [bert, distilbert]
tasks: [rte, {{name: reviews, train: data/train.csv, validation: data/dev.csv}}]
methods: [base]
hyperparameters:
  batch_size: 32
  epochs: 2
  learning_rate: {{grid: [1.0e-5, 3.0e-5]}}
resources: {{cpu: 1}}
"""
SEEDS = """\
name: {name}
stage: seeds
best_of: [{grid}]
seeds: [1, 2]
models: [bert, distilbert]
tasks: [rte, {{name: reviews, train: data/train.csv, validation: data/dev.csv}}]
methods: [base]
resources: {{cpu: 1}}
"""


def _spaces(tmp_path, grid="sharded-grid", seeds="sharded-seeds"):
    (tmp_path / f"{grid}.yaml").write_text(GRID.format(name=grid))
    (tmp_path / f"{seeds}.yaml").write_text(SEEDS.format(name=seeds, grid=grid))
    return [load_search_space(tmp_path / f"{grid}.yaml"), load_search_space(tmp_path / f"{seeds}.yaml")]


@pytest.mark.parametrize("text, expected", [("1/4", Shard(1, 4)), (" 4 / 4 ", Shard(4, 4)), ("1/1", Shard(1, 1))])
def test_a_shard_is_k_of_n(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/4", "5/4", "1", "1/0", "a/b", "-1/2", "1/2/3"])
def test_anything_else_is_refused_naming_the_form(text):
    with pytest.raises(ConfigError, match=r"give K/N, the K-th of N shares \(1 ≤ K ≤ N\)"):
        parse_shard(text)


def test_the_pairs_are_dealt_round_robin_and_every_space_keeps_its_shards_pairs(own_data, tmp_path):
    own_data("sst2", "csv", string_labels=True, folder=tmp_path / "data")
    grid, seeds = _spaces(tmp_path)
    every = pairs_of([grid, seeds])
    assert every == [("bert", "rte"), ("bert", "reviews"), ("distilbert", "rte"), ("distilbert", "reviews")]
    taken = [take_shard([grid, seeds], Shard(k, 3)) for k in (1, 2, 3)]
    held = [pairs_of([s for s in spaces if s is not None]) for spaces in taken]
    assert held == [[every[0], every[3]], [every[1]], [every[2]]]
    for spaces, pairs in zip(taken, held):
        for space in spaces:  # the grid and its seeds stage: the same pairs, and only them, in their groups
            assert sorted((g.model, g.task) for g in space.groups()) == sorted(pairs)
    first_grid = taken[0][0]  # bert × rte and distilbert × reviews: both models, both tasks, two of four pairs
    assert set(first_grid.models) == {"bert", "distilbert"} and set(first_grid.tasks) == {"rte", "reviews"}
    assert first_grid.task("reviews").files == grid.task("reviews").files  # one's own task, as the file defines it
    with pytest.raises(ConfigError, match=r"--shard 5/5: the search has 4 \(model, task\) pair\(s\), so shard 5 "
                                          r"holds none: use at most 4 shards \(sbatch --array=0-3\)"):
        take_shard([grid, seeds], Shard(5, 5))


def test_a_space_without_a_pair_of_the_shard_drops_out(tmp_path):
    for name, task in (("one", "rte"), ("two", "mrpc")):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\nmodels: [bert]\ntasks: [{task}]\nmethods: [base]\n"
                                               "hyperparameters: {learning_rate: {grid: [1.0e-5, 2.0e-5]}}\n")
    one, two = load_search_space(tmp_path / "one.yaml"), load_search_space(tmp_path / "two.yaml")
    assert take_shard([one, two], Shard(1, 2))[1] is None
    assert take_shard([one, two], Shard(2, 2))[0] is None


@pytest.mark.slow
def test_shards_run_apart_fill_one_table_and_one_status(local_ray, own_data, tmp_path):
    own_data("sst2", "csv", string_labels=True, folder=tmp_path / "data")
    spaces = _spaces(tmp_path)
    storage, store = tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}"
    said: list[str] = []
    for k in (1, 2):  # as two array tasks would, one after the other here
        summaries = run_searches(spaces, storage_path=storage, tracking_uri=store, write=said.append,
                                 simulation=Simulation(time_factor=0.01), shard=Shard(k, 2))
        assert all(not s.failed and not s.interrupted for s in summaries)
    assert "shard 1/2: bert × rte, distilbert × rte" in said
    assert "shard 2/2: bert × reviews, distilbert × reviews" in said
    # one results folder a shard (its Ray experiment, lock and resume state)
    folders = sorted(p.name for p in storage.iterdir() if p.is_dir() and p.name.startswith("sharded"))
    assert folders == ["sharded-grid+sharded-seeds.shard-1-of-2", "sharded-grid+sharded-seeds.shard-2-of-2"]

    table = build_table(store, "sharded-grid", simulated=True)
    assert sorted(zip(table.model, table.task)) == sorted(pairs_of(spaces))  # one table, every pair
    grid_runs = tracking.trial_runs(store, "sharded-grid", simulated=True)
    seeds_runs = tracking.trial_runs(store, "sharded-seeds", simulated=True)
    assert len(grid_runs) == 8 and len(seeds_runs) == 8 and len({r.trial_id for r in grid_runs + seeds_runs}) == 16
    best = {(r.model, r.task): r.config["learning_rate"] for r in grid_runs
            if r.trial_id in set(table.trial_id)}
    assert all(r.config["learning_rate"] == best[(r.model, r.task)] for r in seeds_runs)  # its own shard's best

    client = tracking.client(store)
    experiment_id = client.get_experiment_by_name("sharded-grid").experiment_id
    parents = tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})
    assert sorted(p.data.tags[tracking.TAG_SHARD] for p in parents) == ["1/2", "2/2"]
    status, headline = search_status(store, "sharded-grid")
    assert headline.startswith("search sharded-grid (2 shards): FINISHED; 8 of 8 trials ended")
    assert len(status) == 4 and set(status.finished) == {2} and set(status.pending) == {0}

    said.clear()  # shard 1 again, as a requeued array task: nothing to run, nothing written twice
    run_searches(spaces, storage_path=storage, tracking_uri=store, write=said.append, resume_if_started=True,
                 simulation=Simulation(time_factor=0.01), shard=Shard(1, 2))
    assert any("every trial had ended; nothing to run" in line for line in said), said
    assert len(tracking.trial_runs(store, "sharded-grid", simulated=True)) == 8
    assert len(tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})) == 2
