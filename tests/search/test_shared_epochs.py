"""Shared epoch prefixes are exact: a grid of real tiny-bert trials with epochs {1, 2, 3} run shared (one trial per
configuration of 3 epochs, completing 1 and 2 on its way) and unshared (a trial per configuration) gives every
configuration the same MLflow run: the same params, status and per-epoch records (task metrics, eval IsoScore*,
losses), and the same ``best`` table.

Equality is exact (``==`` on floats): on the CPU, with fixed seeds, epoch k of a 3-epoch run performs the same
operations in the same order as epoch k of a k-epoch run (data order and Σ_S draws seeded by (seed, k), a constant
learning rate under ``recipe: paper``). Only wall-clock times and checkpoint sizes differ.
"""

from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.replay.reading import read_grid
from istar_tune.replay.summary import replay_table
from istar_tune.results.tables import build_table
from istar_tune.search.run import run_search
from istar_tune.search.spaces.file import load_search_space
from istar_tune.training.loop import MEASURED_KEYS

pytestmark = pytest.mark.slow

UNCOMPARED = (*MEASURED_KEYS, "checkpoint_bytes")
RAY_CPUS = 2  # real trials: a worker per core (tests/conftest.py, local_ray)


def _records(uri: str, name: str) -> dict[tuple, dict]:
    """Per configuration (method, learning rate, epochs): params, status and every metric's history."""
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name(name).experiment_id
    out = {}
    for run in tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"}):
        params = run.data.params
        key = (params["method"], params["learning_rate"], params["epochs"])
        assert key not in out, f"two runs of {key}"
        histories = {m: [(h.step, h.value) for h in sorted(client.get_metric_history(run.info.run_id, m),
                                                            key=lambda h: h.step)]
                     for m in run.data.metrics if m not in UNCOMPARED}
        out[key] = {"params": params, "status": run.data.tags[tracking.TAG_STATUS], "histories": histories}
    return out


@pytest.mark.parametrize("extra", [{}, {"holdout": 0.25, "patience": 1}], ids=["last-epoch", "holdout-patience"])
def test_shared_and_unshared_grids_give_the_same_runs_and_table(extra, local_ray, glue_tiny, tmp_path, space_yaml):
    names, summaries = [], []
    for share in (True, False):
        name = f"grid-{'shared' if share else 'unshared'}"
        path = tmp_path / f"{name}.yaml"
        path.write_text(space_yaml(
            name=name, tasks=["rte"], methods=["base", "istar"], resources={"cpu": 1},
            hyperparameters={"epochs": {"grid": [1, 2, 3]}, "learning_rate": {"grid": [1.0e-3, 3.0e-3]}},
            search={"algorithm": "grid", "share_epochs": share},
            settings={"recipe": "paper", "shrinkage_tokens": 400, "checkpoint": "resume", **extra}))
        space = load_search_space(path)
        summaries.append(run_search(space, storage_path=tmp_path / "runs", data_dir=str(glue_tiny),
                                    write=lambda _: None))
        names.append(name)
    shared, unshared = summaries
    assert not shared.failed and not unshared.failed
    assert sum(len(g.trials) for g in shared.groups) == sum(len(g.trials) for g in unshared.groups) == 12
    uri = shared.tracking_uri
    trained_by = {r.data.tags.get(tracking.TAG_TRAINED_BY) for r in tracking.find_runs(
        tracking.client(uri), tracking.client(uri).get_experiment_by_name(names[0]).experiment_id)
        if r.data.tags.get(tracking.TAG_ROLE) == "trial"}
    assert len(trained_by) == 4  # 12 configurations trained by 2 methods × 2 learning rates = 4 trials

    a, b = _records(uri, names[0]), _records(uri, names[1])
    assert len(a) == 12 and set(a) == set(b)
    for key in a:
        assert a[key]["params"] == b[key]["params"], key
        assert a[key]["status"] == b[key]["status"], key
        assert a[key]["histories"] == b[key]["histories"], key  # exact: see the module docstring
    base_three = a[("base", "0.001", "3")]["histories"]
    assert "eval_isoscore_star" in base_three and "accuracy" in base_three and "train_loss" in base_three

    tables = [build_table(uri, n, "best", tasks=["rte"]).drop(columns=["trial_id"], errors="ignore")
              for n in names]
    assert tables[0].to_dict("records") == tables[1].to_dict("records")
    _replays_agree(uri, names, tables[0], patience=bool(extra))


def _replays_agree(uri: str, names: list[str], best, patience: bool) -> None:
    """The replay reads both grids as the same curves and chooses as the table does; shared or not, every strategy
    chooses the same, only the grid's cost differs (4 trials of 3 epochs against 12 configurations' 24 epochs)."""
    if patience:
        with pytest.raises(ConfigError, match="not a complete grid: its trials stop early"):
            read_grid(uri, names[0])
        return
    shared, unshared = read_grid(uri, names[0]), read_grid(uri, names[1])
    for unit in shared:
        row = best[best.method == unit.method].iloc[0]
        chosen = unit.model_of(unit.best)
        assert (chosen["learning_rate"], chosen["epochs"]) == (row.learning_rate, row.epochs)
    assert [u.grid_epochs for u in shared] == [6, 6] and [u.grid_epochs for u in unshared] == [12, 12]
    assert [u.curves for u in shared] == [u.curves for u in unshared]  # each in the configurations' order
    tables = [replay_table(units, replays=5) for units in (shared, unshared)]
    costs = ["epochs_share", "grid_epochs", "gpu_hours_share"]
    assert tables[0].drop(columns=costs).equals(tables[1].drop(columns=costs))
    assert (tables[0].epochs_share == 2 * tables[1].epochs_share).all()
