from __future__ import annotations

from istar_tune import tracking
from istar_tune.tracking.earlier import EarlierRun, KnownRuns, Takeover, config_identity, earlier_runs, identity


def _run(trial_id: str, config: dict, has_params: bool = True) -> EarlierRun:
    return EarlierRun(f"run-{trial_id}", trial_id, 1, has_params, True, config_identity(config))


def test_a_configuration_is_its_logged_hyperparameters_without_the_searchs_settings(trial_config):
    params = tracking.logged_params(trial_config, {"max_length": 32})
    assert identity(params) == config_identity(trial_config) == identity(tracking.logged_params(trial_config))
    assert config_identity({**trial_config, "learning_rate": 5e-5}) != config_identity(trial_config)
    assert EarlierRun("r", "a1b2c3d4-e3", 0, True, False, ()).trial == "a1b2c3d4"
    assert EarlierRun("r", "a1b2c3d4", 0, True, False, ()).trial == "a1b2c3d4"


def test_only_runs_of_trials_tune_did_not_restore_are_taken_over_once_each(trial_config):
    other, third = {**trial_config, "learning_rate": 5e-5}, {**trial_config, "learning_rate": 7e-5}
    takeover = Takeover([_run("kept", trial_config), _run("lost-e2", other), _run("bare", third, has_params=False),
                         _run("again", other)], restored={"kept"})
    assert len(takeover) == 2  # kept goes on itself; bare has no params to match
    assert takeover.claim(trial_config) is None and takeover.claim(third) is None
    assert takeover.claim(other).run_id == "run-lost-e2"  # a repeated configuration: one run per new trial
    assert takeover.claim(other).run_id == "run-again"
    assert takeover.claim(other) is None


def test_earlier_runs_are_read_with_their_epochs_params_and_whether_they_ended(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    writer = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    writer.start("t1", trial_config)
    writer.metrics("t1", 2, {"accuracy": 0.5})
    writer.start("t2", trial_config)
    writer.end("t2", "finished", "FINISHED")
    assert writer.close(timeout=30)
    found = {r.trial_id: r for r in earlier_runs(client, experiment, "exp")}
    assert (found["t1"].logged_epoch, found["t1"].unended, found["t2"].unended) == (2, True, False)
    assert found["t1"].identity == config_identity(trial_config) and found["t1"].has_params
    assert all(not r.unended and r.identity == () for r in earlier_runs(client, experiment, "another search"))


def test_another_shards_running_trials_are_not_this_drivers_to_end(mlflow_store, trial_config):
    uri, client, experiment = mlflow_store
    other = tracking.RunWriter(uri, experiment, "exp", "shard-2-search-run", {}, threads=1)
    other.start("theirs", trial_config)  # running now, under the other shard's search run
    assert other.close(timeout=30)
    found = {r.trial_id: r for r in earlier_runs(client, experiment, "exp", "shard-1-search-run")}
    assert not found["theirs"].unended and found["theirs"].identity == ()
    assert found["theirs"].run_id  # still known (a trial id is never written twice)
    mine = {r.trial_id: r for r in earlier_runs(client, experiment, "exp", "shard-2-search-run")}
    assert mine["theirs"].unended and mine["theirs"].identity == config_identity(trial_config)
    # the writer of shard 1, at its search's end, leaves it running
    writer = tracking.RunWriter(uri, experiment, "exp", "shard-1-search-run", {}, threads=1)
    assert writer.end_unknown(set(), "interrupted", "KILLED", {}) == []
    assert writer.close(timeout=30)
    assert client.get_run(found["theirs"].run_id).info.status == "RUNNING"


def test_the_writers_book_repairs_a_bare_run_once_takes_over_a_lost_trials_and_names_the_lost(mlflow_store,
                                                                                                trial_config):
    uri, client, experiment = mlflow_store
    other = {**trial_config, "learning_rate": 5e-5}
    earlier = tracking.RunWriter(uri, experiment, "exp", "p", {}, threads=1)
    earlier.start("bare", trial_config)
    earlier.start("lost", other)
    earlier.metrics("lost", 1, {"accuracy": 0.5})
    assert earlier.close(timeout=30)
    bare = next(r for r in earlier_runs(client, experiment, "exp") if r.trial_id == "bare")
    client.delete_run(bare.run_id)  # an earlier driver that died between creating a run and writing its params:
    bare_run = client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: "bare",
                                                   tracking.TAG_SEARCH: "exp"}).info.run_id
    book = KnownRuns(restored={"bare"})
    book.load(client, experiment, "exp", "p")
    assert book.find("bare", None) == (bare_run, False)  # no configuration yet: nothing to repair with
    assert book.find("bare", trial_config) == (bare_run, True) and book.find("bare", trial_config)[1] is False
    taken, _ = book.find("new", other)  # Tune lost "lost": the trial that runs its configuration again goes on in it
    assert taken == next(r.run_id for r in earlier_runs(client, experiment, "exp") if r.trial_id == "lost")
    assert book.logged_epoch["new"] == 1 and book.find("another", other) == (None, False)
    assert book.lost(known={"new"}, open_trials=set()) == ["bare"]  # left running, not held by Tune
    book.created("fresh", "run-fresh")
    assert book.find("fresh", trial_config) == ("run-fresh", False) and book.logged_epoch["fresh"] == 0
