"""A finished grid read back from MLflow: a rehearsal's synthetic landscape (``--simulate``: its best configuration
known) with a seeds stage that re-ran it, and everything short of a complete grid refused in one line. The real
tiny-bert grid, shared and unshared, is read in tests/search/test_shared_epochs.py."""

from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.replay.reading import curve_of, read_grid
from istar_tune.results.tables import build_table
from istar_tune.search.run import run_search
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation


@pytest.mark.slow
def test_the_curves_are_mlflows_records_and_the_grids_choice_is_the_tables(rehearsal):
    _, uri = rehearsal
    units = read_grid(uri, "landscape", simulated=True)
    assert [(u.method, len(u.curves), u.grid_epochs) for u in units] == [("base", 6, 6), ("istar", 12, 12)]
    best = build_table(uri, "landscape", "best", simulated=True)
    client = tracking.client(uri)
    runs = {(r.method, r.config["learning_rate"], r.config["epochs"], r.config.get("lam")): r
            for r in tracking.trial_runs(uri, "landscape", simulated=True)}
    for unit in units:
        row = best[best.method == unit.method].iloc[0]
        chosen = unit.model_of(unit.best)
        assert (chosen["learning_rate"], chosen["epochs"], chosen.get("lam")) == (
            row.learning_rate, row.epochs, None if unit.method == "base" else row.lam)
        for curve in unit.curves:
            run = runs[(unit.method, curve.config["learning_rate"], curve.epochs, curve.config.get("lam"))]
            assert list(curve.values) == [m.value for m in sorted(client.get_metric_history(run.run_id, "accuracy"),
                                                                  key=lambda m: m.step)]
        assert unit.noise is not None and unit.noise > 0  # three seeds re-ran each method's choice
    across = read_grid(uri, "landscape", simulated=True, across_methods=True)
    assert [(u.method, len(u.curves)) for u in across] == [("all", 18)]


@pytest.mark.slow
def test_a_partial_grid_a_seeds_stage_and_a_sampled_search_are_refused_in_one_line(rehearsal, capsys):
    _, uri = rehearsal
    with pytest.raises(ConfigError, match=r"landscape-seeds.*is a seeds stage, not a grid: replay the grid it chose "
                                          r"from \(landscape\)"):
        read_grid(uri, "landscape-seeds", simulated=True)
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name("landscape").experiment_id
    run = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial", "method": "base"})[0]
    client.set_tag(run.info.run_id, tracking.TAG_STATUS, "interrupted")
    try:
        with pytest.raises(ConfigError, match=r"not a complete grid: 1 configuration\(s\) did not finish: base "):
            read_grid(uri, "landscape", simulated=True)
        client.delete_run(run.info.run_id)
        assert main(["replay", "--experiment", "landscape", "--tracking-uri", uri, "--simulated"]) == 2
        err = capsys.readouterr().err
        assert "not a complete grid: bert/rte/base: 5 of 6 configurations have runs in MLflow" in err
        assert len(err.strip().splitlines()) == 1
    finally:
        client.restore_run(run.info.run_id)
        client.set_tag(run.info.run_id, tracking.TAG_STATUS, "finished")


@pytest.mark.slow
def test_a_search_that_sampled_is_refused(local_ray, grid_text, tmp_path):
    (tmp_path / "tpe.yaml").write_text(grid_text.replace("name: landscape", "name: sampled").replace(
        "epochs: {grid: [1, 2, 3]}", "epochs: {choice: [1, 2, 3]}").replace(
        "resources: {cpu: 1}", "resources: {cpu: 1}\nsearch: {algorithm: tpe, num_samples: 2}").replace(
        "lam: {grid: [-1, 1]}", "lam: {choice: [-1, 1]}").replace(
        "learning_rate: {grid: [1.0e-5, 3.0e-5]}", "learning_rate: {choice: [1.0e-5, 3.0e-5]}"))
    summary = run_search(load_search_space(tmp_path / "tpe.yaml"), storage_path=tmp_path / "runs",
                         write=lambda _: None, simulation=Simulation(time_factor=0.0005))
    with pytest.raises(ConfigError, match="not a complete grid: its search ran algorithm tpe"):
        read_grid(summary.tracking_uri, "sampled", simulated=True)


def test_with_held_out_data_a_curve_is_the_best_held_out_score_so_far_and_the_dev_score_of_its_epoch():
    from istar_tune.tracking.runs import TrialRun

    run = TrialRun(run_id="r1", trial_id="t1", model="tiny-bert", task="rte", method="base", status="finished",
                   config={"learning_rate": 1e-3, "batch_size": 16, "epochs": 4}, metrics={})
    records = {"accuracy": [(1, 0.50), (2, 0.60), (3, 0.70), (4, 0.65)],
               "holdout_accuracy": [(1, 0.55), (2, 0.55), (3, 0.58), (4, 0.52)]}
    curve = curve_of(run, lambda run_id, metric: records[metric], holdout=True)
    # Held out: 0.55 (epoch 1), a tie at 2 keeps epoch 1, 0.58 at 3, 0.52 at 4 keeps 3.
    assert curve.values == (0.55, 0.55, 0.58, 0.58) and curve.dev == (0.50, 0.50, 0.70, 0.70)
    assert curve_of(run, lambda run_id, metric: records[metric], holdout=False).values == (0.5, 0.6, 0.7, 0.65)
    records["accuracy"] = [(1, 0.5), (3, 0.7)]
    with pytest.raises(ConfigError, match=r"holds accuracy for epochs \[1, 3\] of 4: the grid's curves are not "
                                          "aligned"):
        curve_of(run, lambda run_id, metric: records[metric], holdout=False)
