"""MLflow tracking without Ray: paginated reads, the background run writer, simulated runs kept apart."""

from __future__ import annotations

import subprocess
import sys

import pytest

from istar_tune import tracking
from istar_tune.errors import ConfigError


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = client.create_experiment("exp", artifact_location=(tmp_path / "artifacts").as_uri())
    return uri, client, experiment


CONFIG = {"model": "tiny-bert", "task": "rte", "method": "istar", "learning_rate": 1e-3, "batch_size": 16,
          "epochs": 2, "lam": -1.0, "zeta": 0.2}


def test_find_runs_reads_every_page(store, monkeypatch):
    uri, client, experiment = store
    for index in range(7):
        client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: f"t{index}"})
    client.create_run(experiment, tags={tracking.TAG_ROLE: "search"})
    monkeypatch.setattr(tracking.store, "PAGE_SIZE", 3)
    runs = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    assert sorted(r.data.tags[tracking.TAG_TRIAL_ID] for r in runs) == [f"t{i}" for i in range(7)]


@pytest.mark.parametrize("value", ["it's", 'say "hi"', "back\\slash", "tick`s"])
def test_tag_values_with_quotes_are_matched_exactly(store, value):
    _, client, experiment = store
    client.create_run(experiment, tags={tracking.TAG_SEARCH: value})
    client.create_run(experiment, tags={tracking.TAG_SEARCH: value + "x"})
    assert len(tracking.find_runs(client, experiment, **{tracking.TAG_SEARCH: value})) == 1


class Flaky:
    """A client whose first ``failures`` writes raise, as a server that is briefly away would."""

    def __init__(self, real, failures: int):
        self.real, self.failures, self.calls = real, failures, 0

    def __getattr__(self, name):
        method = getattr(self.real, name)
        if name not in ("log_batch", "create_run", "set_terminated", "update_run"):
            return method

        def call(*args, **kwargs):
            self.calls += 1
            if self.failures > 0:
                self.failures -= 1
                raise ConnectionError("tracking server unreachable")
            return method(*args, **kwargs)
        return call


def test_the_writer_retries_until_the_store_answers_and_logs_each_epoch_once(store):
    uri, client, experiment = store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search"}).info.run_id
    flaky = Flaky(client, failures=3)
    writer = tracking.RunWriter(uri, experiment, "exp", parent, {"extra": "1"}, threads=1,
                                make_client=lambda _uri: flaky)
    writer.start("t1", CONFIG)
    for epoch in (1, 2, 2):  # epoch 2 re-reported, as after a restore
        writer.metrics("t1", epoch, {"accuracy": 0.5 + epoch / 10, "epoch": epoch, "training_iteration": epoch})
    writer.end("t1", "finished", "FINISHED")
    assert writer.close(timeout=60)
    assert flaky.calls > 3 and not writer.errors
    runs = tracking.trial_runs(uri, "exp")
    assert len(runs) == 1 and runs[0].status == "finished" and runs[0].config["lam"] == -1.0
    history = client.get_metric_history(runs[0].run_id, "accuracy")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.6), (2, 0.7)]
    assert client.get_run(runs[0].run_id).info.status == "FINISHED"
    assert len(writer.latencies_ms) == 5


def test_a_resumed_writer_finds_the_trials_run_and_skips_epochs_it_holds(store):
    uri, client, experiment = store
    first = tracking.RunWriter(uri, experiment, "exp", "p", {})
    first.start("t1", CONFIG)
    first.metrics("t1", 1, {"accuracy": 0.6})
    assert first.close(timeout=30)
    second = tracking.RunWriter(uri, experiment, "exp", "p", {})
    second.start("t1", CONFIG)
    second.metrics("t1", 1, {"accuracy": 0.99})  # already logged: skipped
    second.metrics("t1", 2, {"accuracy": 0.7})
    second.end("t1", "finished", "FINISHED")
    assert second.close(timeout=30)
    runs = tracking.trial_runs(uri, "exp")
    assert len(runs) == 1
    assert sorted((m.step, m.value) for m in client.get_metric_history(runs[0].run_id, "accuracy")) == \
        [(1, 0.6), (2, 0.7)]


def test_simulated_runs_are_refused_by_tables_of_real_runs_and_the_reverse(store):
    uri, client, experiment = store
    client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_SIMULATED: "true",
                                        tracking.TAG_TRIAL_ID: "t1"})
    with pytest.raises(ConfigError, match="simulated runs"):
        tracking.trial_runs(uri, "exp")
    from istar_tune.results.tables import build_table

    with pytest.raises(ConfigError, match="--simulated"):
        build_table(uri, "exp", "best")
    real = tracking.client(uri).create_experiment("real")
    tracking.client(uri).create_run(real, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: "t2"})
    with pytest.raises(ConfigError, match="real runs"):
        tracking.trial_runs(uri, "real", simulated=True)


def test_reading_runs_back_loads_neither_ray_nor_torch():
    code = ("import sys, istar_tune.results.tables, istar_tune.tracking, istar_tune.config; "
            "print('ray' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_status_counts_each_groups_trials_and_its_best_so_far(store, capsys):
    from istar_tune.cli import main

    uri, client, experiment = store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search",
                                                 tracking.TAG_PLAN: tracking.encode_plan({"m/rte/base": 4})})
    writer = tracking.RunWriter(uri, experiment, "exp", parent.info.run_id, {})
    config = {**CONFIG, "model": "m", "method": "base"}
    for trial_id, status, value in (("a", "finished", 0.7), ("b", "failed", 0.9), ("c", None, 0.8)):
        writer.start(trial_id, config)
        writer.metrics(trial_id, 1, {"accuracy": value})
        if status:
            writer.end(trial_id, status, "FINISHED" if status == "finished" else "FAILED")
    assert writer.close(timeout=60)
    assert main(["status", "--experiment", "exp", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "2 of 4 trials ended, 1 running" in out
    assert "| m/rte/base | 1 | 1 | 1 | 0 | 1 | 0 | accuracy | 0.8 |" in out


def test_searches_starting_together_create_a_new_sqlite_store_once(tmp_path):
    import threading

    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    errors = []

    def start():
        try:
            tracking.prepare_store(uri)
            client = tracking.client(uri)
            tracking.ensure_experiment(client, f"e{threading.get_ident()}", str(tmp_path / "artifacts"))
        except Exception as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(tracking.client(uri).search_experiments()) == 4  # Default + one per search


def _group_run(client, experiment, trial_id, value, status="finished", task="rte", simulated=False):
    from mlflow.entities import Metric, Param

    tags = {tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: trial_id, tracking.TAG_STATUS: status,
            tracking.TAG_GROUP: f"bert/{task}/istar"}
    if simulated:
        tags[tracking.TAG_SIMULATED] = "true"
    run = client.create_run(experiment, tags=tags)
    params = {"model": "bert", "task": task, "method": "istar", "learning_rate": 1e-5 * (1 + int(trial_id[1:]))}
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()],
                     metrics=[Metric("accuracy", value, 0, 1)] if value is not None else [])


def test_best_trials_of_named_groups_read_only_their_top_runs_and_agree_with_a_full_read(store, monkeypatch):
    uri, client, experiment = store
    monkeypatch.setattr(tracking.runs, "BEST_OF_TOP", 3)
    # rte: a failed trial scores highest (ignored), three tie at 0.8 (the lowest trial id wins) beyond the top 3.
    for trial_id, value, status in [("t9", 0.95, "failed"), ("t5", 0.8, "finished"), ("t3", 0.8, "stopped_early"),
                                    ("t7", 0.8, "finished"), ("t1", 0.5, "finished"), ("t2", None, "finished")]:
        _group_run(client, experiment, trial_id, value, status)
    for trial_id, value in [("t4", 0.6), ("t6", 0.7)]:  # mrpc: settled by its top runs
        _group_run(client, experiment, trial_id, value, task="mrpc")
    groups = [("bert", "rte", "istar"), ("bert", "mrpc", "istar"), ("bert", "cola", "istar")]
    picked = tracking.best_trials(uri, "exp", groups=groups)
    full = tracking.best_trials(uri, "exp")
    assert {k: v.trial_id for k, v in picked.items()} == {k: v.trial_id for k, v in full.items()}
    assert picked[("bert", "rte", "istar")].trial_id == "t3" and picked[("bert", "mrpc", "istar")].trial_id == "t6"
    assert ("bert", "cola", "istar") not in picked  # a group without runs has no best
    _group_run(client, experiment, "t8", 0.9, simulated=True)
    with pytest.raises(ConfigError, match="--simulated"):
        tracking.best_trials(uri, "exp", groups=groups)


def test_plans_of_an_experiment_merge_and_groups_it_never_planned_are_not_queried(store, monkeypatch):
    uri, client, experiment = store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search"}).info.run_id
    tracking.record_plan(client, parent, {"bert/rte/istar": 6})
    tracking.record_plan(client, parent, {"bert/mrpc/istar": 2})  # run again for another task: both kept
    assert tracking.planned_groups(client, experiment) == {"bert/rte/istar", "bert/mrpc/istar"}
    _group_run(client, experiment, "t1", 0.7)
    _group_run(client, experiment, "t2", 0.6, task="mrpc")
    queries = []
    real = tracking.client

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def search_runs(self, experiment_ids, filter_string="", **kwargs):
            queries.append(filter_string)
            return self.inner.search_runs(experiment_ids, filter_string=filter_string, **kwargs)

    monkeypatch.setattr(tracking.runs, "client", lambda u: Counting(real(u)))
    groups = [("bert", task, "istar") for task in ("rte", "mrpc", "cola", "sst2")]
    picked = tracking.best_trials(uri, "exp", groups=groups)
    assert {k[1]: v.trial_id for k, v in picked.items()} == {"rte": "t1", "mrpc": "t2"}
    group_queries = [q for q in queries if tracking.TAG_GROUP in q]
    assert len(group_queries) == 2 and not any("cola" in q or "sst2" in q for q in group_queries)
    # A plan that kept only its total says nothing of its groups: every group is asked for again.
    client.set_tag(parent, tracking.TAG_PLAN, tracking.encode_plan({tracking.PLAN_TOTAL: 8}))
    tracking.record_plan(client, parent, {"bert/cola/istar": 1})
    assert tracking.planned_groups(client, experiment) is None
    queries.clear()
    assert {k[1] for k in tracking.best_trials(uri, "exp", groups=groups)} == {"rte", "mrpc"}
    assert len({q for q in queries if tracking.TAG_GROUP in q}) == 4
