from __future__ import annotations

import json
import statistics

import pytest

from istar_tune import tracking
from istar_tune.results.plots import lambda_points, study_points, write_plots


@pytest.fixture
def search_store(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "s", str(tmp_path / "artifacts"))
    parent = tracking.parent_run(client, exp, "s", {})
    for i, (acc, iso) in enumerate([(0.80, 0.20), (0.82, 0.22)]):
        log_trial(client, exp, f"b{i}", "minilm", "sst2", "base",
               {"accuracy": [0.7, acc], "eval_isoscore_star": [0.3, iso]})
    for i, (acc, iso) in enumerate([(0.70, 0.02), (0.74, 0.04)]):
        log_trial(client, exp, f"n{i}", "minilm", "sst2", "istar", {"accuracy": [acc], "eval_isoscore_star": [iso]},
               lam=-5.0)
    log_trial(client, exp, "p0", "minilm", "sst2", "istar", {"accuracy": [0.75], "eval_isoscore_star": [0.45]}, lam=5.0)
    return uri, client, parent


def test_lambda_points_are_means_and_stds_per_lambda(search_store):
    uri, _, _ = search_store
    points = lambda_points(tracking.trial_runs(uri, "s"), "accuracy")
    assert [(p["method"], p["lam"], p["runs"]) for p in points] == [("base", 0.0, 2), ("istar", -5.0, 2),
                                                                   ("istar", 5.0, 1)]
    assert points[0]["metric_mean"] == pytest.approx(0.81) and points[0]["isoscore_mean"] == pytest.approx(0.21)
    assert points[1]["metric_std"] == pytest.approx(0.02) and points[1]["isoscore_std"] == pytest.approx(0.01)


def test_write_plots_writes_pngs_and_logs_them_to_the_parent_run(search_store, tmp_path):
    uri, client, parent = search_store
    written = write_plots(uri, "s", tmp_path / "plots")
    names = ["budget-accuracy-minilm-sst2.png", "epochs-minilm-sst2.png", "pooled-isoscore-vs-accuracy-minilm-sst2.png"]
    assert sorted(p.name for p in written) == names
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    artifacts = {a.path for a in client.list_artifacts(parent, "plots")}
    assert artifacts == {f"plots/{name}" for name in names}


def test_the_budget_figure_draws_every_n_of_each_methods_curve(search_store, tmp_path):
    uri, _, _ = search_store
    write_plots(uri, "s", tmp_path / "plots", log_to_mlflow=False)
    points = json.loads((tmp_path / "plots" / "budget-accuracy-minilm-sst2.json").read_text())["points"]
    assert [(p["method"], p["n"]) for p in points] == [("base", 1), ("base", 2), ("istar", 1), ("istar", 2),
                                                       ("istar", 3)]
    # base's two configurations at 80 and 82: one draw averages them, two distinct draws are both: 82
    assert points[0]["chosen"] == pytest.approx(81.0) and points[1]["chosen"] == pytest.approx(82.0)
    # istar's three at 70, 74 and 75: two distinct of three hold 75 in 2 of the 3 pairs, else 74; three: 75
    assert points[3]["chosen"] == pytest.approx(round((2 * 75 + 74) / 3, 2)) and points[4]["chosen"] == 75.0


def test_no_budget_figure_where_each_method_finished_one_configuration(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "one", str(tmp_path / "artifacts"))
    tracking.parent_run(client, exp, "one", {})
    log_trial(client, exp, "b0", "minilm", "sst2", "base", {"accuracy": [0.8], "eval_isoscore_star": [0.2]})
    written = write_plots(uri, "one", tmp_path / "plots", log_to_mlflow=False)
    assert not any(p.name.startswith("budget-") for p in written)


def _seed_run(log_trial, client, experiment, trial_id, metrics, **params):
    run_id = log_trial(client, experiment, trial_id, "bert", "cola", "istar", metrics, **params)
    client.set_tag(run_id, tracking.TAG_STAGE, "seeds")
    return run_id


@pytest.mark.parametrize(("key", "values", "figure"), [("zeta", [0.0, 0.4], "figure7-mcc-vs-zeta"),
                                                      ("layer", [None, 1, 2], "figure8-mcc-vs-layer")])
def test_a_study_is_drawn_per_value_with_error_bars_over_its_seeds_only(key, values, figure, log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "study", str(tmp_path / "artifacts"))
    scores = {}
    for i, value in enumerate(values):
        for seed in (1, 2, 3):
            score = 0.3 + 0.1 * i + 0.01 * seed
            scores.setdefault(value, []).append(score)
            _seed_run(log_trial, client, experiment, f"t{i}{seed}", {"mcc": [score]}, seed=seed,
                      **{key: value})
    written = write_plots(uri, "study", tmp_path / "plots", log_to_mlflow=False)
    assert [p.name for p in written] == [f"{figure}-bert-cola.png", "epochs-bert-cola.png"]
    plotted = json.loads(written[0].with_suffix(".json").read_text())
    assert plotted["varied"] == key and [p["value"] for p in plotted["points"]] == values
    for point in plotted["points"]:
        assert point["seeds"] == [1, 2, 3]
        assert point["metric_mean"] == pytest.approx(statistics.mean(scores[point["value"]]))
        assert point["metric_std"] == pytest.approx(statistics.stdev(scores[point["value"]]))


def test_seed_runs_differing_in_two_hyperparameters_are_not_a_study(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "mixed", str(tmp_path / "artifacts"))
    _seed_run(log_trial, client, experiment, "a", {"mcc": [0.3]}, zeta=0.2, lam=-1.0)
    _seed_run(log_trial, client, experiment, "b", {"mcc": [0.3]}, zeta=0.4, lam=1.0)
    with pytest.raises(Exception, match="differ in lam, zeta: a study varies one hyperparameter"):
        study_points(tracking.trial_runs(uri, "mixed"), "mcc")
