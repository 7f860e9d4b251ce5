from __future__ import annotations

from istar_tune import tracking


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


def test_the_writer_retries_until_the_store_answers_and_logs_each_epoch_once(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search"}).info.run_id
    flaky = Flaky(client, failures=3)
    writer = tracking.RunWriter(uri, experiment, "exp", parent, {"extra": "1"}, threads=1,
                                make_client=lambda _uri: flaky)
    writer.start("t1", trial_config)
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


def test_a_resumed_writer_finds_the_trials_run_and_skips_epochs_it_holds(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    first = tracking.RunWriter(uri, experiment, "exp", "p", {})
    first.start("t1", trial_config)
    first.metrics("t1", 1, {"accuracy": 0.6})
    assert first.close(timeout=30)
    second = tracking.RunWriter(uri, experiment, "exp", "p", {})
    second.start("t1", trial_config)
    second.metrics("t1", 1, {"accuracy": 0.99})  # already logged: skipped
    second.metrics("t1", 2, {"accuracy": 0.7})
    second.end("t1", "finished", "FINISHED")
    assert second.close(timeout=30)
    runs = tracking.trial_runs(uri, "exp")
    assert len(runs) == 1
    assert (sorted((m.step, m.value) for m in client.get_metric_history(runs[0].run_id, "accuracy")) ==
            [(1, 0.6), (2, 0.7)])


def test_a_trials_run_has_its_params_and_group_as_soon_as_it_exists(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    writer = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    writer.start("t1", trial_config)
    assert writer.flush(timeout=30)  # no epoch yet
    (run,) = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    assert run.data.params["learning_rate"] == "0.001" and run.data.params["model"] == "tiny-bert"
    assert run.data.tags[tracking.TAG_GROUP] == "tiny-bert/rte/istar" and not run.data.metrics
    assert writer.close(timeout=30)


def test_a_run_a_killed_driver_left_without_params_is_repaired_when_its_trial_starts_again(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    # What a driver killed between creating the run and writing its params leaves behind.
    client.create_run(experiment, run_name="t1", tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: "t1",
                                                       tracking.TAG_STATUS: "running", "model": "tiny-bert",
                                                       "task": "rte", "method": "istar",
                                                       tracking.TAG_GROUP: "tiny-bert/rte/istar"})
    (orphan,) = tracking.trial_runs(uri, "exp")
    assert orphan.group == ("tiny-bert", "rte", "istar")  # read from its tags, not filled in with defaults
    writer = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    writer.start("t1", trial_config)
    writer.metrics("t1", 1, {"accuracy": 0.6})
    writer.end("t1", "finished", "FINISHED")
    assert writer.close(timeout=30)
    (run,) = tracking.trial_runs(uri, "exp")  # one run, not a second one
    assert run.config["learning_rate"] == 1e-3 and run.config["lam"] == -1.0 and run.status == "finished"


def test_reconcile_ends_a_run_an_earlier_driver_left_running_with_the_epochs_it_lost(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    killed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    killed.start("t1", trial_config)
    killed.metrics("t1", 1, {"accuracy": 0.6})
    killed.start("t2", trial_config)
    killed.metrics("t2", 2, {"accuracy": 0.8})
    killed.end("t2", "finished", "FINISHED")
    killed.start("t4", trial_config)
    assert killed.flush(timeout=30)  # then the driver dies: t1's epoch 2 and end, t4's three epochs never written
    resumed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    resumed.reconcile("t1", trial_config, [(1, {"accuracy": 0.6}), (2, {"accuracy": 0.7})], "finished", "FINISHED")
    resumed.reconcile("t2", trial_config, [(2, {"accuracy": 0.1})], "failed", "FAILED")  # ended before: untouched
    resumed.reconcile("t3", trial_config, [(2, {"accuracy": 0.5})], "finished", "FINISHED")  # never had a run
    resumed.reconcile("t4", trial_config, [(e, {"accuracy": e / 10}) for e in (1, 2, 3)], "finished", "FINISHED")
    assert resumed.close(timeout=30)
    runs = {r.trial_id: r for r in tracking.trial_runs(uri, "exp")}
    assert ({k: (r.status, r.metrics["accuracy"]) for k, r in runs.items()} ==
            {"t1": ("finished", 0.7), "t2": ("finished", 0.8), "t3": ("finished", 0.5), "t4": ("finished", 0.3)})
    assert [m.step for m in client.get_metric_history(runs["t1"].run_id, "accuracy")] == [1, 2]
    assert [m.value for m in client.get_metric_history(runs["t1"].run_id, "accuracy")] == [0.6, 0.7]  # not twice
    assert [m.step for m in client.get_metric_history(runs["t4"].run_id, "accuracy")] == [1, 2, 3]
    assert client.get_run(runs["t1"].run_id).info.status == "FINISHED"
    assert runs["t3"].config["learning_rate"] == 1e-3


def test_a_run_finished_by_a_resume_drops_the_interrupted_attempts_error(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    first = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    first.start("t1", trial_config)
    first.metrics("t1", 1, {"accuracy": 0.6})
    first.end("t1", "interrupted", "KILLED", {tracking.TAG_ERROR: "interrupted by SIGINT (Ctrl-C)"})
    assert first.close(timeout=30)
    run_id = tracking.trial_runs(uri, "exp")[0].run_id
    assert client.get_run(run_id).data.tags[tracking.TAG_ERROR] == "interrupted by SIGINT (Ctrl-C)"
    resumed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    resumed.start("t1", trial_config)
    resumed.metrics("t1", 2, {"accuracy": 0.7})
    resumed.end("t1", "finished", "FINISHED")
    resumed.start("t2", {**trial_config, "learning_rate": 2e-3})  # never had an error: starts and ends cleanly
    resumed.end("t2", "finished", "FINISHED")
    assert resumed.close(timeout=30) and not resumed.errors
    run = client.get_run(run_id)
    assert run.data.tags[tracking.TAG_STATUS] == "finished" and tracking.TAG_ERROR not in run.data.tags
    assert run.info.status == "FINISHED"


def test_end_unknown_ends_the_runs_left_running_whose_trials_tune_no_longer_knows(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    killed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    for trial_id in ("t1", "t2", "t3"):
        killed.start(trial_id, trial_config)
    killed.end("t3", "finished", "FINISHED")
    assert killed.flush(timeout=30)  # the driver dies with t1 and t2 running
    neighbour = tracking.RunWriter(uri, experiment, "other", "p2", {}, threads=1)
    neighbour.start("x1", trial_config)  # another search's run in the same experiment: not this writer's to end
    assert neighbour.close(timeout=30)
    resumed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    resumed.start("t4", trial_config)  # open here: Tune knows it, whatever the caller says
    assert resumed.end_unknown({"t2", "t3"}, "interrupted", "KILLED", {tracking.TAG_ERROR: "lost"}) == ["t1"]
    assert resumed.end_unknown({"t2", "t3"}, "interrupted", "KILLED", {tracking.TAG_ERROR: "lost"}) == []  # once
    assert resumed.close(timeout=30) and not resumed.errors
    runs = {r.data.tags[tracking.TAG_TRIAL_ID]: r for r in tracking.find_runs(client, experiment)}
    assert {k: (r.data.tags[tracking.TAG_STATUS], r.info.status) for k, r in runs.items()} == {
        "t1": ("interrupted", "KILLED"), "t2": ("running", "RUNNING"), "t3": ("finished", "FINISHED"),
        "t4": ("running", "RUNNING"), "x1": ("running", "RUNNING")}
    assert runs["t1"].data.tags[tracking.TAG_ERROR] == "lost"


def test_end_unknown_on_a_store_it_cannot_read_ends_nothing_and_counts_the_error(mlflow_store):
    uri, client, experiment = mlflow_store

    class Gone:
        def search_runs(self, *args, **kwargs):
            raise ConnectionError("tracking server unreachable")

    writer = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1, make_client=lambda _uri: Gone())
    assert writer.end_unknown(set(), "interrupted", "KILLED", {}) == []
    assert writer.errors == ["ConnectionError: tracking server unreachable"]
    assert writer.close(timeout=30)


def test_a_resumed_writer_hands_a_lost_trials_run_to_the_trial_of_its_configuration(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    other = {**trial_config, "learning_rate": 5e-5}
    killed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1, settings={"max_length": 32})
    for trial_id, config in (("t1", trial_config), ("t2", other)):
        killed.start(trial_id, config)
        killed.metrics(trial_id, 1, {"accuracy": 0.6})
    assert killed.flush(timeout=30)  # the driver dies; Tune's restored state holds t1 only (t2 was lost)
    resumed = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1, settings={"max_length": 64},
                                 restored={"t1"})
    resumed.start("t1", trial_config)
    resumed.start("n1", trial_config)  # a new trial of t1's configuration: t1 goes on, so a run of its own
    resumed.start("n2", other)  # t2's configuration again: it goes on in t2's run (the settings are not compared)
    resumed.metrics("n2", 1, {"accuracy": 0.99})  # held already: skipped
    resumed.metrics("n2", 2, {"accuracy": 0.7})
    for trial_id in ("t1", "n1", "n2"):
        resumed.end(trial_id, "finished", "FINISHED")
    assert resumed.end_unknown({"t1", "n1", "n2"}, "interrupted", "KILLED", {}) == []  # t2's run is n2's now
    assert resumed.close(timeout=30) and not resumed.errors
    runs = {r.data.tags[tracking.TAG_TRIAL_ID]: r for r in tracking.find_runs(client, experiment)}
    assert sorted(runs) == ["n1", "n2", "t1"]
    assert all(r.info.status == "FINISHED" and r.data.tags[tracking.TAG_STATUS] == "finished" for r in runs.values())
    assert runs["n2"].data.params["learning_rate"] == "5e-05"
    assert (sorted((m.step, m.value) for m in client.get_metric_history(runs["n2"].info.run_id, "accuracy")) ==
            [(1, 0.6), (2, 0.7)])


def test_a_writer_takes_over_no_run_unless_resumed_with_tunes_restored_trials(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    first = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    first.start("t1", trial_config)
    assert first.close(timeout=30)
    again = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)  # restored=None: a new search
    again.start("n1", trial_config)
    assert again.close(timeout=30)
    assert sorted(r.data.tags[tracking.TAG_TRIAL_ID] for r in tracking.find_runs(client, experiment)) == ["n1", "t1"]


def test_writers_sharing_a_small_connection_pool_never_wait_on_each_other(tmp_path, monkeypatch, trial_config, caplog):
    """MLflow's SQLAlchemy store takes a second pooled connection inside ``log_batch``: writers whose threads each held
    one and waited for another hung a 4-search experiment (32 threads, a pool of 15) until their retries ran out."""
    import time

    monkeypatch.setenv("MLFLOW_SQLALCHEMYSTORE_POOL_SIZE", "2")
    monkeypatch.setenv("MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW", "1")
    uri = f"sqlite:///{tmp_path / 'small-pool.db'}"  # a new store: its engine is built with this pool
    tracking.prepare_store(uri)
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "exp", str(tmp_path / "artifacts"))
    writers = [tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=8, window_s=0, retry_for_s=120)
               for _ in range(2)]
    began = time.monotonic()
    for w, writer in enumerate(writers):
        for t in range(12):
            config = {**trial_config, "learning_rate": (w * 12 + t + 1) * 1e-4}
            writer.start(f"w{w}t{t}", config)
            writer.metrics(f"w{w}t{t}", 1, {"accuracy": 0.5, "epoch": 1})
            writer.end(f"w{w}t{t}", "finished", "FINISHED")
    assert all(writer.close(timeout=120) for writer in writers)
    took = time.monotonic() - began
    assert not any(writer.errors for writer in writers)
    assert "MLflow write failed" not in caplog.text and took < 25, (took, caplog.text[-2000:])  # a pool wait is 30 s
    runs = tracking.trial_runs(uri, "exp")
    assert len(runs) == 24 and all(r.status == "finished" and "learning_rate" in r.config for r in runs)
