"""Fused trials on the user's path: a grid of real tiny-bert configurations (Base and I-STAR × 3 learning rates) run
with ``search.fuse`` trains as 2 Tune trials and gives the 6 MLflow runs the same grid gives unfused — the same
params and statuses, every logged metric within the stated tolerance, the same ``best`` table — and a diverging member
ends FAILED alone while the others of its bundle finish.

Tolerance: a fused member's arithmetic is its configuration's, batched (vmap over stacked weights), so its sums may
round differently; measured on tiny-bert the losses agree within 1e-6 relative and the weights within 1e-4 after a
few steps (tests/training/test_bundle.py), hence ``rel 1e-3`` on every metric here (two epochs of 80 steps). The
unfused grid runs with the same ``attn_implementation: eager`` (fusing needs it), so only the fusing differs.
"""

from __future__ import annotations

import json
import math

import pytest

from istar_tune import tracking
from istar_tune.replay.reading import read_grid
from istar_tune.results.tables import build_table
from istar_tune.search.run import run_search
from istar_tune.search.spaces.file import load_search_space
from istar_tune.training.loop import MEASURED_KEYS

pytestmark = pytest.mark.slow

UNCOMPARED = (*MEASURED_KEYS, "checkpoint_bytes")
RAY_CPUS = 2  # real trials: a worker per core (tests/conftest.py, local_ray)
RATES = [1.0e-3, 2.0e-3, 3.0e-3]


def _runs(uri: str, name: str, by: tuple[str, ...] = ("method", "learning_rate", "lam")) -> dict[tuple, dict]:
    """Per configuration (its params ``by``): params, status, error, the trial that trained it and every compared
    metric's history."""
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name(name).experiment_id
    out = {}
    for run in tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"}):
        params = run.data.params
        key = tuple(params.get(p) for p in by)
        assert key not in out, f"two runs of {key}"
        histories = {m: [(h.step, h.value) for h in sorted(client.get_metric_history(run.info.run_id, m),
                                                            key=lambda h: h.step)]
                     for m in run.data.metrics if m not in UNCOMPARED}
        out[key] = {"params": params, "status": run.data.tags[tracking.TAG_STATUS], "histories": histories,
                    "error": run.data.tags.get(tracking.TAG_ERROR, ""), "task": run.data.tags.get(tracking.TAG_TASK),
                    "trained_by": run.data.tags.get(tracking.TAG_TRAINED_BY)}
    return out


def _assert_as_unfused(fused: dict[tuple, dict], alone: dict[tuple, dict]) -> None:
    """Each fused run has its unfused twin's params (``setting.fused`` aside) and status, and every metric's history
    within the stated tolerance."""
    assert set(fused) == set(alone)
    for key in fused:
        fused_params = {k: v for k, v in fused[key]["params"].items() if k != "setting.fused"}
        assert fused_params == alone[key]["params"], key
        assert fused[key]["params"]["setting.fused"] == "yes" and "setting.fused" not in alone[key]["params"]
        assert fused[key]["status"] == alone[key]["status"] == "finished", key
        assert set(fused[key]["histories"]) == set(alone[key]["histories"]), key
        for metric, history in fused[key]["histories"].items():
            steps, values = zip(*history)
            twin_steps, twin = zip(*alone[key]["histories"][metric])
            assert steps == twin_steps, (key, metric)
            for got, want in zip(values, twin):
                same = got == pytest.approx(want, rel=1e-3, abs=1e-6) or math.isnan(got) and math.isnan(want)
                assert same, (key, metric, values, twin)


def _search(tmp_path, glue_tiny, space_yaml, name: str, fuse: int, tasks=("rte",), settings=None, **overrides):
    path = tmp_path / f"{name}.yaml"
    path.write_text(space_yaml(
        name=name, tasks=list(tasks), resources={"cpu": 1},
        search={"algorithm": "grid", "fuse": fuse},
        settings={"shrinkage_tokens": 400, "checkpoint": "resume", "attn_implementation": "eager", **(settings or {})},
        **overrides))
    return run_search(load_search_space(path), storage_path=tmp_path / "runs", data_dir=str(glue_tiny),
                      write=lambda _: None)


def test_a_fused_grid_gives_the_unfused_grids_runs_and_table(local_ray, glue_tiny, tmp_path, space_yaml):
    grid = {"methods": ["base", "istar"], "hyperparameters": {"epochs": 2, "learning_rate": {"grid": RATES}}}
    fused = _search(tmp_path, glue_tiny, space_yaml, "fused", 4, **grid)
    alone = _search(tmp_path, glue_tiny, space_yaml, "alone", 1, **grid)
    assert not fused.failed and not alone.failed
    uri = fused.tracking_uri
    a, b = _runs(uri, "fused"), _runs(uri, "alone")
    assert len(a) == 6
    assert len({run["trained_by"] for run in a.values()}) == 2  # 6 configurations in 2 trials (one per method)
    assert all(run["trained_by"] is None for run in b.values())
    _assert_as_unfused(a, b)
    assert {"accuracy", "train_loss", "eval_isoscore_star"} <= set(a[("istar", "0.001", "-1.0")]["histories"])
    tables = [build_table(uri, n, "best", tasks=["rte"]).drop(columns=["trial_id"]) for n in ("fused", "alone")]
    assert tables[0].to_dict("records") == tables[1].to_dict("records")
    # The replay reads the fused grid as the unfused one: each member's own curve and cost (its own epochs).
    grids = [read_grid(uri, n) for n in ("fused", "alone")]
    assert [u.grid_epochs for u in grids[0]] == [u.grid_epochs for u in grids[1]] == [6, 6]
    for fused_unit, alone_unit in zip(*grids):
        assert fused_unit.best == alone_unit.best


def test_fused_members_share_epoch_prefixes_as_unfused_trials_do(local_ray, glue_tiny, tmp_path, space_yaml,
                                                                  user_tasks):
    """Under a constant learning rate, configurations that differ only in epochs share a trial; fused, each such
    shared trial is one member, which completes its shorter configuration on its way: 8 configurations in 2 trials
    (against 4 shared trials unfused), each configuration its own run, objective and dev value as unfused. On a task
    of one's own (SST-2's sentences with words as labels, from a CSV)."""
    definition = user_tasks(glue_tiny, tmp_path / "tasks")["words"]
    grid = {"tasks": [str(definition)], "methods": ["base", "istar"], "hyperparameters": {"epochs": {"grid": [1, 2]},
                                                              "learning_rate": {"grid": RATES[:2]}},
            "settings": {"recipe": "paper", "holdout": 0.3}}
    fused = _search(tmp_path, glue_tiny, space_yaml, "fused", 4, **grid)
    alone = _search(tmp_path, glue_tiny, space_yaml, "alone", 1, **grid)
    assert not fused.failed and not alone.failed
    uri = fused.tracking_uri
    by = ("method", "learning_rate", "epochs")
    a, b = _runs(uri, "fused", by=by), _runs(uri, "alone", by=by)
    assert len(a) == 8
    assert len({run["trained_by"] for run in a.values()}) == 2  # one trial per method, of 2 shared members
    assert len({run["trained_by"] for run in b.values()}) == 4  # unfused: 4 shared trials
    _assert_as_unfused(a, b)
    assert [h[0] for h in a[("istar", "0.001", "1")]["histories"]["accuracy"]] == [1]
    assert [h[0] for h in a[("istar", "0.001", "2")]["histories"]["accuracy"]] == [1, 2]

    def ended(summary) -> dict[tuple, tuple]:
        return {(t.config["method"], t.config["learning_rate"], t.config["epochs"]): (t.status, t.value, t.dev_value)
                for g in summary.groups for t in g.trials}

    assert ended(fused).keys() == ended(alone).keys() and len(ended(fused)) == 8
    for key, (status, value, dev) in ended(fused).items():
        assert status == "finished" and value is not None and dev is not None, key
        assert (value, dev) == pytest.approx(ended(alone)[key][1:], rel=1e-3, abs=1e-6), key
    assert any(t.trial_id.endswith("-m1-e1") for g in fused.groups for t in g.trials)
    assert all(json.loads(run["task"])["name"] == "my-words" for run in a.values())
    tables = [build_table(uri, n, "best", tasks=["my-words"]).drop(columns=["trial_id"]) for n in ("fused", "alone")]
    assert len(tables[0]) == 2
    assert tables[0].to_dict("records") == tables[1].to_dict("records")
    grids = [read_grid(uri, n) for n in ("fused", "alone")]
    assert [u.grid_epochs for u in grids[0]] == [u.grid_epochs for u in grids[1]] == [4, 4]  # 2 epochs a member


def test_a_diverging_member_fails_alone_and_its_bundle_goes_on(local_ray, glue_tiny, tmp_path, space_yaml,
                                                               user_tasks):
    """On a task of one's own (SST-2's sentences with words as labels, from a CSV): the members carry its
    definition."""
    definition = user_tasks(glue_tiny, tmp_path / "tasks")["words"]
    summary = _search(tmp_path, glue_tiny, space_yaml, "diverging", 3, tasks=[str(definition)], methods=["istar"],
                      hyperparameters={"epochs": 2, "learning_rate": 1.0e-3},
                      method_hyperparameters={"istar": {"lam": {"grid": [-1.0, 1.0e39]}, "zeta": 0.2}})
    runs = _runs(summary.tracking_uri, "diverging")
    assert all(json.loads(run["task"])["name"] == "my-words" for run in runs.values())
    assert {key[2]: run["status"] for key, run in runs.items()} == {"-1.0": "finished", "1e+39": "failed"}
    assert len({run["trained_by"] for run in runs.values()}) == 1  # both in one trial
    assert runs[("istar", "0.001", "1e+39")]["error"].startswith("TrainingError: the loss became inf at epoch 1, step")
    assert [h[0] for h in runs[("istar", "0.001", "-1.0")]["histories"]["accuracy"]] == [1, 2]
    outcomes = [(t.trial_id.rsplit("-", 1)[1], t.status) for g in summary.groups for t in g.trials]
    assert outcomes == [("m0", "finished"), ("m1", "failed")]


def _fused_space(folder, space_yaml, name: str) -> tuple:
    """A fused grid of real tiny-bert trials on 640 SST-2 examples: learning rates {1e-3, 2e-3} × epochs {1, 2} as
    one trial of 4 members, two of which end after epoch 1 while the others train on."""
    space = folder / f"{name}.yaml"
    space.write_text(space_yaml(
        name=name, search={"fuse": 4},
        hyperparameters={"epochs": {"grid": [1, 2]}, "learning_rate": {"grid": [1.0e-3, 2.0e-3]}},
        settings={"max_train_samples": 640, "max_eval_samples": 64, "attn_implementation": "eager"}))
    return space


def _histories(uri: str, name: str) -> dict[tuple, dict]:
    """Per configuration (learning rate, epochs): its status and the history of every record compared."""
    return {key: {"status": run["status"], **{m: run["histories"].get(m, []) for m in
                                              ("accuracy", "eval_isoscore", "train_loss", "objective")}}
            for key, run in _runs(uri, name, by=("learning_rate", "epochs")).items()}


def test_ctrl_c_mid_bundle_then_resume_loses_nothing_and_trains_no_finished_member_again(glue, tmp_path, space_yaml,
                                                                                         migrated_store):
    import os
    import re
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from istar_tune.tracking.storage import default_tracking_uri

    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env = {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1", "GLUE_DIR": str(glue)}
    storages = {}
    for name in ("whole", "stopped"):
        storages[name] = tmp_path / name
        migrated_store(storages[name])
    space = _fused_space(tmp_path, space_yaml, "whole")
    whole = subprocess.run([str(bin_dir / "istar-tune"), "search", str(space), "--storage-path",
                            str(storages["whole"])], capture_output=True, text=True, env=env, timeout=400)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]

    command = [str(bin_dir / "istar-tune"), "search", str(_fused_space(tmp_path, space_yaml, "stopped")),
               "--storage-path", str(storages["stopped"])]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              start_new_session=True)
    try:
        deadline, seen = time.monotonic() + 240, []
        while time.monotonic() < deadline:
            seen.append(driver.stdout.readline())
            if " epoch 1/2:" in seen[-1]:  # every member has closed epoch 1: stop half way through epoch 2
                time.sleep(float(re.search(r"\((\d+(?:\.\d+)?) s\)", seen[-1]).group(1)) / 2)
                break
        else:
            raise AssertionError("the fused search did not reach its second epoch:\n" + "".join(seen))
        os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C in a terminal
        assert driver.wait(timeout=180) == 130
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=env, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "4 configurations in 1 trial (fused), 4 finished" in resumed.stdout, resumed.stdout
    trained = [line for line in resumed.stdout.splitlines() if re.search(r"-m\d epoch \d/\d:", line)]
    assert trained and all(" epoch 2/2:" in line for line in trained), trained  # nothing finished trains again
    stopped = _histories(default_tracking_uri(storages["stopped"]), "stopped")
    reference = _histories(default_tracking_uri(storages["whole"]), "whole")
    assert len(stopped) == 4 and stopped == reference  # a resumed bundle is the uninterrupted one, bit for bit
    assert {k: [s for s, _ in v["accuracy"]] for k, v in stopped.items()} == {
        (lr, e): list(range(1, int(e) + 1)) for lr in ("0.001", "0.002") for e in ("1", "2")}


def test_a_fused_seeds_stage_gives_the_unfused_stages_runs_and_table(local_ray, glue_tiny, tmp_path, space_yaml):
    """Each seed its own member (its own data order, dropout and Σ_S draws) in one trial: the runs and the seeds
    table the unfused stage gives."""
    _search(tmp_path, glue_tiny, space_yaml, "grid", 1, methods=["istar"],
            hyperparameters={"epochs": 1, "learning_rate": {"grid": [1.0e-3, 3.0e-3]}},
            method_hyperparameters={"istar": {"lam": -1.0, "zeta": 0.2}})
    summaries = {}
    for name, fuse in (("seeds-fused", 3), ("seeds-alone", 1)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(space_yaml(
            name=name, tasks=["rte"], methods=["istar"], stage="seeds", best_of=["grid"], seeds=[1, 2, 3],
            hyperparameters=None, resources={"cpu": 1}, search={"fuse": fuse},
            settings={"shrinkage_tokens": 400, "checkpoint": "resume", "attn_implementation": "eager"}))
        summaries[name] = run_search(load_search_space(path), storage_path=tmp_path / "runs",
                                     data_dir=str(glue_tiny), write=lambda _: None)
    assert not any(s.failed for s in summaries.values())
    uri = summaries["seeds-fused"].tracking_uri
    fused, alone = (_runs(uri, name, by=("seed",)) for name in ("seeds-fused", "seeds-alone"))
    assert sorted(fused) == [("1",), ("2",), ("3",)]
    assert len({run["trained_by"] for run in fused.values()}) == 1  # three seeds in one trial
    _assert_as_unfused(fused, alone)
    assert len({run["histories"]["train_loss"][0][1] for run in fused.values()}) == 3  # three data orders
    tables = [build_table(uri, name, "seeds", tasks=["rte"]) for name in ("seeds-fused", "seeds-alone")]
    assert tables[0].to_dict("records") == tables[1].to_dict("records")
