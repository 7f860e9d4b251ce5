from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.results.plots import lambda_points, write_plots


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
    assert sorted(p.name for p in written) == ["epochs-minilm-sst2.png", "isoscore-vs-accuracy-minilm-sst2.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    artifacts = {a.path for a in client.list_artifacts(parent, "plots")}
    assert artifacts == {"plots/epochs-minilm-sst2.png", "plots/isoscore-vs-accuracy-minilm-sst2.png"}
