"""What a search needs at cluster scale, rehearsed small: groups in flight together, an MLflow server that goes away
for a while, more runs than one page, a trial whose newest checkpoint is broken (simulated trials: no training)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from istar_tune import tracking
from istar_tune.search.run import run_search, run_searches
from istar_tune.search.spaces.file import load_search_space
from istar_tune.search.tune.simulate import Simulation
from istar_tune.testing import MlflowServer

pytestmark = pytest.mark.slow

SPACE = """\
name: {name}
models: [bert]
tasks: [rte, mrpc]
methods: [base]
hyperparameters:
  batch_size: 32
  epochs: {{grid: [3, 4]}}
  learning_rate: {{grid: [1.0e-5, 3.0e-5, 5.0e-5]}}
resources: {{cpu: 1}}
settings: {{checkpoint: resume}}
"""


def _space(tmp_path: Path, name: str, text: str = SPACE):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.format(name=name))
    return load_search_space(path)


def _trained_span(client, run) -> tuple[float, float]:
    """When a run's trial trained, in ms: its first epoch's start (the first report less that epoch's time) to its last
    report. MLflow's own start and end times are the writer's, which may create and end a short run in one batch."""
    reports = sorted(client.get_metric_history(run.run_id, "epoch_time_s"), key=lambda m: m.step)
    return reports[0].timestamp - 1000 * reports[0].value, reports[-1].timestamp


def test_two_groups_trials_are_in_flight_at_once(local_ray, tmp_path):
    # Trials of 1 to 2 s: long beside the seconds between the first workers' starts on a busy machine.
    summary = run_search(_space(tmp_path, "together"), storage_path=tmp_path / "runs", write=lambda _: None,
                         simulation=Simulation(time_factor=0.05))
    assert not summary.failed and sum(len(g.trials) for g in summary.groups) == 12
    client = tracking.client(summary.tracking_uri)
    runs = tracking.trial_runs(summary.tracking_uri, "together", simulated=True)
    spans = {}
    for run in runs:
        spans.setdefault(run.task, []).append(_trained_span(client, run))
    overlapping = [(a, b) for a in spans["rte"] for b in spans["mrpc"] if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, f"the two groups ran one after the other: {spans}"
    assert all(r.metrics.get("torch_imported", 0) == 0 for r in runs)  # the stand-in never loads torch


def test_the_logger_survives_the_tracking_server_going_away(local_ray, tmp_path):
    with MlflowServer() as server:
        space = _space(tmp_path, "outage")
        outcome = {}

        def search():
            outcome["summary"] = run_search(space, storage_path=tmp_path / "runs", tracking_uri=server.uri,
                                            write=lambda _: None, simulation=Simulation(time_factor=0.02))

        thread = threading.Thread(target=search)
        thread.start()
        time.sleep(8)  # trials are running and logging
        server.stop()
        time.sleep(6)  # trials go on reporting while nothing answers
        server.start()
        thread.join(timeout=300)
        summary = outcome["summary"]
        assert not summary.failed and not summary.mlflow_errors
        runs = tracking.trial_runs(server.uri, "outage", simulated=True)
        assert len(runs) == 12 and len({r.trial_id for r in runs}) == 12
        client = tracking.client(server.uri)
        for run in runs:
            assert run.status == "finished"
            steps = [m.step for m in client.get_metric_history(run.run_id, "accuracy")]
            assert sorted(steps) == list(range(1, run.config["epochs"] + 1))  # every epoch, exactly once


def test_tables_read_every_run_of_a_store_with_more_than_one_page(tmp_path, monkeypatch):
    from mlflow.entities import Metric, Param, RunTag

    from istar_tune.results.tables import build_table
    from istar_tune.tracking import store

    # Pages of 100 runs: the same page-token path as the real 5,000, with 130 runs written instead of 5,030 (a minute).
    monkeypatch.setattr(store, "PAGE_SIZE", 100)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = client.create_experiment("big", artifact_location=(tmp_path / "art").as_uri())
    tasks = ["rte", "mrpc", "cola"]
    count = store.PAGE_SIZE + 30
    for index in range(count):
        task = tasks[index * len(tasks) // count]  # cola's runs are all past the first page
        run = client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: f"t{index:05d}",
                                                  tracking.TAG_STATUS: "finished"})
        metric = "mcc" if task == "cola" else "accuracy"
        client.log_batch(run.info.run_id, metrics=[Metric(metric, index / count, 0, 1)],
                         params=[Param("model", "bert"), Param("task", task), Param("method", "base"),
                                 Param("learning_rate", "3e-05")], tags=[RunTag("task", task)])
    table = build_table(uri, "big", "best", tasks=tasks)
    assert list(table.task) == tasks
    assert int(table.trials.sum()) == count
    assert table.set_index("task").loc["cola", "trial_id"] == f"t{count - 1:05d}"


def test_a_trial_whose_newest_checkpoint_is_broken_resumes_from_the_one_before(local_ray, tmp_path):
    """A trial's worker is killed after its second epoch and its newest checkpoint truncated: the retry resumes
    from the first checkpoint and says so in MLflow."""
    import contextlib
    import os
    import signal

    import psutil

    text = (SPACE.replace("tasks: [rte, mrpc]", "tasks: [rte]").replace("epochs: {{grid: [3, 4]}}", "epochs: 4")
            .replace("learning_rate: {{grid: [1.0e-5, 3.0e-5, 5.0e-5]}}", "learning_rate: 3.0e-5")
            .replace("settings: {{checkpoint: resume}}", "settings: {{checkpoint: state}}\ncheckpoints_to_keep: 2\n"
                     "max_failures: 1"))
    space = _space(tmp_path, "broken", text)
    storage = tmp_path / "runs"
    sabotaged = []

    def sabotage():
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            newest = sorted((storage / "broken").glob("*/checkpoint_000001/simulated-state.json"))
            if newest:
                time.sleep(0.3)  # the report reaches the driver; the next epoch takes over a second
                for process in psutil.Process().children(recursive=True):  # this test's Ray alone: the
                    with contextlib.suppress(psutil.NoSuchProcess):  # trials of another pytest worker live on
                        if (process.cmdline() or [""])[0].startswith("ray::ImplicitFunc"):
                            os.kill(process.pid, signal.SIGKILL)
                payload = newest[0].parent / "payload.bin"
                payload.write_bytes(payload.read_bytes()[:10])
                sabotaged.append(newest[0].parent.name)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=sabotage)
    thread.start()
    summary = run_search(space, storage_path=storage, write=lambda _: None,
                         simulation=Simulation(time_factor=0.3, checkpoint_bytes=4096))
    thread.join()
    assert sabotaged == ["checkpoint_000001"]
    assert not summary.failed
    runs = tracking.trial_runs(summary.tracking_uri, "broken", simulated=True)
    assert len(runs) == 1 and runs[0].status == "finished"
    client = tracking.client(summary.tracking_uri)
    note = client.get_run(runs[0].run_id).data.tags.get(tracking.TAG_RESTORED_FROM)
    assert note and note.startswith("resumed from checkpoint_000000") and "truncated" in note
    assert sorted(m.step for m in client.get_metric_history(runs[0].run_id, "accuracy")) == [1, 2, 3, 4]


def test_searches_run_as_one_experiment_and_seeds_rerun_each_groups_best(local_ray, tmp_path):
    grid = _space(tmp_path, "chain-grid")
    seeds = _space(tmp_path, "chain-seeds", "name: {name}\nstage: seeds\nbest_of: [chain-grid]\nseeds: [1, 2]\n"
                                            "models: [bert]\ntasks: [rte, mrpc]\nmethods: [base]\n"
                                            "resources: {{cpu: 1}}\nsettings: {{checkpoint: resume}}\n")
    first, second = run_searches([grid, seeds], storage_path=tmp_path / "runs", write=lambda _: None,
                                 simulation=Simulation(time_factor=0.01))
    assert (first.name, second.name) == ("chain-grid", "chain-seeds") and not first.failed and not second.failed
    assert not first.interrupted and not second.interrupted
    assert sum(len(g.trials) for g in first.groups) == 12 and sum(len(g.trials) for g in second.groups) == 4
    assert first.storage_path == second.storage_path  # one Tune experiment
    best = {g.group.task: g.best.config for g in first.groups}
    for group in second.groups:
        assert sorted(t.config["seed"] for t in group.trials) == [1, 2]
        for trial in group.trials:
            for key in ("learning_rate", "epochs", "batch_size"):
                assert trial.config[key] == best[group.group.task][key]
    # Each search keeps its own MLflow experiment, one run per trial, with the seeds stage's tag.
    grid_runs = tracking.trial_runs(first.tracking_uri, "chain-grid", simulated=True)
    seeds_runs = tracking.trial_runs(first.tracking_uri, "chain-seeds", simulated=True)
    assert len(grid_runs) == 12 and len(seeds_runs) == 4
    assert {r.stage for r in seeds_runs} == {"seeds"}
    assert len({r.trial_id for r in grid_runs + seeds_runs}) == 16


ASHA_SHARED = """\
name: {name}
models: [bert]
tasks: [rte]
methods: [base]
hyperparameters:
  batch_size: {{grid: [8, 16, 32]}}
  epochs: {{grid: [3, 4, 5]}}
  learning_rate: {{grid: [1.0e-5, 3.0e-5, 5.0e-5]}}
resources: {{cpu: 1}}
concurrency: 1
scheduler: {{type: asha, grace_period: 1, reduction_factor: 3}}
settings: {{recipe: paper, checkpoint: resume}}
"""


def test_asha_stops_a_shared_trial_and_it_completes_only_the_configurations_it_reached(local_ray, tmp_path):
    summary = run_search(_space(tmp_path, "asha-shared", ASHA_SHARED), storage_path=tmp_path / "runs",
                         write=lambda _: None, simulation=Simulation(time_factor=0.005))
    assert not summary.failed
    outcomes = [t for g in summary.groups for t in g.trials]
    assert len(outcomes) == 27 and len({t.trained_by for t in outcomes}) == 9  # 27 configurations, 9 trials
    client = tracking.client(summary.tracking_uri)
    experiment = client.get_experiment_by_name("asha-shared").experiment_id
    runs = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    assert len(runs) == 27
    reached = {}
    for run in runs:
        reached.setdefault(run.data.tags[tracking.TAG_TRAINED_BY], []).append(run)
    stopped = 0
    for trial, configurations in reached.items():
        last = max(int(r.data.metrics["epoch"]) for r in configurations)  # where the trial ended
        for run in configurations:
            epochs, status = int(run.data.params["epochs"]), run.data.tags[tracking.TAG_STATUS]
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "accuracy")]
            if epochs <= last:
                assert status == "finished" and steps == list(range(1, epochs + 1)), (trial, epochs)
            else:  # ASHA stopped the trial before this configuration's last epoch
                assert status == "stopped_early" and steps == list(range(1, last + 1)), (trial, epochs)
                assert run.data.tags["istar_tune.stopped_after_epoch"] == str(last)
                stopped += 1
    assert stopped > 0  # ASHA stopped some trials (9 trials, rungs at epochs 1 and 3)
