"""The machines' load on the search's own MLflow run while it runs (a rehearsal on a local Ray instance)."""

from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.search.run import run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.system_metrics import node_name
from istar_tune.search.tune.simulate import Simulation

pytestmark = pytest.mark.slow
SPACE = """\
name: loaded
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
  batch_size: 16
  epochs: 3
  learning_rate: {grid: [1.0e-5, 2.0e-5, 3.0e-5, 4.0e-5]}
resources: {cpu: 1}
settings: {checkpoint: resume}
"""


def test_the_search_run_holds_each_nodes_system_metrics_and_none_when_off(tmp_path, local_ray):
    import ray

    (tmp_path / "space.yaml").write_text(SPACE)
    space = load_search_space(tmp_path / "space.yaml")
    summary, = run_searches([space], storage_path=tmp_path / "on", write=lambda _: None, system_metrics_s=0.5,
                            simulation=Simulation(time_factor=0.002))
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("loaded").experiment_id
    parent = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "search"})[0]
    node = node_name(next(n for n in ray.nodes() if n["NodeID"] == ray.get_runtime_context().get_node_id()))
    keys = set(parent.data.metrics)
    assert {f"system/{node}/cpu_utilization_percentage", f"system/{node}/system_memory_usage_megabytes"} <= keys
    history = client.get_metric_history(parent.info.run_id, f"system/{node}/cpu_utilization_percentage")
    assert len(history) >= 2 and all(0 <= m.value <= 100 * 64 for m in history)
    summary, = run_searches([space], storage_path=tmp_path / "off", write=lambda _: None, system_metrics_s=0,
                            simulation=Simulation(time_factor=0.002))
    client = tracking.client(summary.tracking_uri)
    parent = tracking.find_runs(client, client.get_experiment_by_name("loaded").experiment_id,
                                **{tracking.TAG_ROLE: "search"})[0]
    assert not any(key.startswith("system/") for key in parent.data.metrics)


def test_a_monitor_that_cannot_log_is_silent_but_with_debug(mlflow_store, caplog):
    import logging
    import time

    from istar_tune.search.system_metrics import _NodeMonitors

    uri, _, _ = mlflow_store

    def failed_lines() -> list[str]:  # a run the store does not hold: MLflow's monitor fails to read it back
        monitors = _NodeMonitors(["0" * 32], uri, 0.05, "n")
        time.sleep(0.5)
        monitors.stop()
        return [r.getMessage() for r in caplog.records
                if r.name.startswith("mlflow.system_metrics") and r.levelno >= logging.WARNING]

    ours = logging.getLogger("istar_tune.search.system_metrics")
    try:
        assert failed_lines() == []  # the search says what failed its store; MLflow's lines hold whole SQL batches
        ours.setLevel(logging.DEBUG)  # as --debug sets it
        assert any(line.startswith("Failed to get mlflow run") for line in failed_lines())
    finally:
        ours.setLevel(logging.NOTSET)
        logging.getLogger("mlflow.system_metrics").setLevel(logging.NOTSET)


def test_the_monitors_last_write_fails_into_the_errors_file_not_onto_the_terminal(tmp_path, local_ray, monkeypatch,
                                                                                    capfd):
    """A full tracking store fails the monitors' last flush as they stop, and MLflow logs that with a traceback
    (``mlflow.store.db.utils``): the monitors stop while the search's tracebacks still go to its errors file (a CI
    run once found that traceback on the terminal, after the file had been closed)."""
    import contextlib
    import logging

    from istar_tune.search import system_metrics

    @contextlib.contextmanager
    def failing_at_its_end(tracking_uri, run_ids, interval_s):
        yield
        try:
            raise OSError("database or disk is full")
        except OSError:
            logging.getLogger("mlflow.store.db.utils").exception("SQLAlchemy database error (the monitors' flush)")

    monkeypatch.setattr(system_metrics, "monitoring", failing_at_its_end)
    (tmp_path / "space.yaml").write_text(SPACE)
    run_searches([load_search_space(tmp_path / "space.yaml")], storage_path=tmp_path / "runs", write=lambda _: None,
                 simulation=Simulation(time_factor=0.002))
    terminal = capfd.readouterr()
    assert "the monitors' flush" not in terminal.err + terminal.out and "Traceback" not in terminal.err
    errors = (tmp_path / "runs" / "loaded.errors.log").read_text()
    assert "the monitors' flush" in errors and "database or disk is full" in errors
