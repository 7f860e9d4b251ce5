from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune import tracking


def test_find_runs_reads_every_page(mlflow_store, monkeypatch):
    uri, client, experiment = mlflow_store
    for index in range(7):
        client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: f"t{index}"})
    client.create_run(experiment, tags={tracking.TAG_ROLE: "search"})
    monkeypatch.setattr(tracking.store, "PAGE_SIZE", 3)
    runs = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "trial"})
    assert sorted(r.data.tags[tracking.TAG_TRIAL_ID] for r in runs) == [f"t{i}" for i in range(7)]


@pytest.mark.parametrize("value", ["it's", 'say "hi"', "back\\slash", "tick`s"])
def test_tag_values_with_quotes_are_matched_exactly(mlflow_store, value):
    _, client, experiment = mlflow_store
    client.create_run(experiment, tags={tracking.TAG_SEARCH: value})
    client.create_run(experiment, tags={tracking.TAG_SEARCH: value + "x"})
    assert len(tracking.find_runs(client, experiment, **{tracking.TAG_SEARCH: value})) == 1


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




def test_plans_of_an_experiment_merge_and_groups_it_never_planned_are_not_queried(group_run, mlflow_store, monkeypatch):
    uri, client, experiment = mlflow_store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search"}).info.run_id
    tracking.record_plan(client, parent, {"bert/rte/istar": 6})
    tracking.record_plan(client, parent, {"bert/mrpc/istar": 2})  # run again for another task: both kept
    assert tracking.planned_groups(client, experiment) == {"bert/rte/istar", "bert/mrpc/istar"}
    group_run(client, experiment, "t1", 0.7)
    group_run(client, experiment, "t2", 0.6, task="mrpc")
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


def test_a_store_that_cannot_be_written_is_refused_before_anything_starts(tmp_path, monkeypatch):
    import pytest

    from istar_tune.errors import ConfigError
    from istar_tune.tracking import store

    (tmp_path / "folder.db").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a folder, not a database file"):
        store.check_writable(f"sqlite:///{tmp_path / 'folder.db'}")
    with pytest.raises(ConfigError, match="is a file, so"):
        store.check_writable(f"sqlite:///{tmp_path / 'file' / 'mlflow.db'}")
    store.check_writable(f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")  # creatable: fine, and nothing created
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError, match="cannot reach the database"):
        store.check_writable("postgresql://mlflow@127.0.0.1:1/mlflow", timeout_s=2)

    calls = []

    class Server:
        def __init__(self, refuse):
            self.refuse = refuse

        def create_experiment(self, name):
            if self.refuse:
                raise RuntimeError("RESOURCE_DOES_NOT_EXIST: PERMISSION_DENIED for user 'reader'")
            calls.append(("create", name))
            return "17"

        def delete_experiment(self, experiment_id):
            calls.append(("delete", experiment_id))

    monkeypatch.setattr(store, "client", lambda uri: Server(refuse=False))
    store.check_writable("http://127.0.0.1:5000")
    assert calls[0][0] == "create" and calls[0][1].startswith("istar-tune-preflight-") and calls[1] == ("delete", "17")
    monkeypatch.setattr(store, "client", lambda uri: Server(refuse=True))
    with pytest.raises(ConfigError, match="refuses writes .*PERMISSION_DENIED"):
        store.check_writable("http://127.0.0.1:5000")


def test_a_store_another_process_holds_locked_is_said_to_be_locked_not_broken(tmp_path):
    """Moving a locked store away (the advice for a broken one) would hide every run it holds."""
    import sqlite3
    import time

    from istar_tune.errors import ConfigError
    from istar_tune.tracking.store import _open

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.prepare_store(uri)
    holder = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    began = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="another process holds it locked") as err:
            _open(uri)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "move it away" not in str(err.value) and "fuser" in str(err.value)
    assert time.monotonic() - began < 120


def test_a_relative_store_leaves_nothing_but_itself_in_the_folder_it_is_created_from(tmp_path, monkeypatch):
    # `sqlite:///mlflow.db` (MLflow's own default) from a clone's root left mlflow.db.lock there, and it was committed.
    monkeypatch.chdir(tmp_path)
    tracking.prepare_store("sqlite:///mlflow.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
    assert tracking.store_lock(tmp_path / "mlflow.db") == tracking.store_lock(Path("mlflow.db"))  # one store, one lock


def test_an_experiment_another_shard_created_since_the_look_is_taken_not_refused(mlflow_store, monkeypatch):
    _, client, _ = mlflow_store
    made = client.create_experiment("shared")  # by the other array task, after this one looked
    looked = []

    def late_look(name):  # the first look sees none, as it would have a moment earlier
        looked.append(name)
        return None if len(looked) == 1 else type(client).get_experiment_by_name(client, name)

    monkeypatch.setattr(client, "get_experiment_by_name", late_look)
    assert tracking.ensure_experiment(client, "shared") == made and len(looked) == 2


def test_each_shard_has_a_parent_run_of_its_own_and_a_search_without_one_keeps_its_own(mlflow_store):
    _, client, experiment = mlflow_store
    first = tracking.parent_run(client, experiment, "grid", {}, shard="1/2")
    second = tracking.parent_run(client, experiment, "grid", {}, shard="2/2")
    whole = tracking.parent_run(client, experiment, "grid", {})
    assert len({first, second, whole}) == 3
    assert tracking.parent_run(client, experiment, "grid", {}, shard="2/2") == second  # requeued: the same run
    assert client.get_run(second).info.run_name == "grid (shard 2/2)"
    assert client.get_run(second).data.tags[tracking.TAG_SHARD] == "2/2"
    assert tracking.TAG_SHARD not in client.get_run(whole).data.tags
