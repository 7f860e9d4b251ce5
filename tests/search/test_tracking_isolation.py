"""A search logs only to its own MLflow runs: an exported ``MLFLOW_RUN_ID`` or an active run in the caller's process
(MLflow's fluent API) redirects nothing (a rehearsal: Ray Tune schedules every trial and MLflow records it)."""

from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.search.run import run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation

pytestmark = pytest.mark.slow
SPACE = """\
name: isolated
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
  batch_size: 16
  epochs: 2
  learning_rate: {grid: [1.0e-5, 2.0e-5, 3.0e-5]}
resources: {cpu: 1}
settings: {checkpoint: resume}
"""


def test_an_exported_run_id_and_an_active_run_leave_the_searchs_runs_where_they_belong(tmp_path, monkeypatch,
                                                                                        local_ray):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # The caller's fluent API finds its store here (mlflow.set_tracking_uri would export it for the rest of the
    # process: the later tests of this worker would log to this store).
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = tracking.client(uri)
    other = client.create_run(client.create_experiment("someone-elses")).info.run_id
    (tmp_path / "space.yaml").write_text(SPACE)
    with mlflow.start_run(experiment_id=client.create_experiment("callers")) as active:
        monkeypatch.setenv("MLFLOW_RUN_ID", other)  # after the caller's run started (start_run would resume it)
        summary, = run_searches([load_search_space(tmp_path / "space.yaml")], storage_path=tmp_path / "runs",
                                tracking_uri=uri, write=lambda _: None, simulation=Simulation(time_factor=0.0005))
        assert mlflow.active_run().info.run_id == active.info.run_id  # the caller's run is still the active one
    assert not summary.failed
    runs = tracking.trial_runs(uri, "isolated", simulated=True)
    assert sorted(r.config["learning_rate"] for r in runs) == [1e-5, 2e-5, 3e-5]
    for run_id in (other, active.info.run_id):  # untouched: no metric, param or child run of the search
        data = client.get_run(run_id).data
        assert not data.metrics and not data.params
        assert not client.search_runs([client.get_run(run_id).info.experiment_id],
                                      f"tags.mlflow.parentRunId = '{run_id}'")
    assert client.get_run(other).info.status == "RUNNING"  # nobody ended it either
