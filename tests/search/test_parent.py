from __future__ import annotations

import json

from istar_tune import tracking
from istar_tune.search import parent
from istar_tune.search.plan import plan
from istar_tune.search.spaces.file import load_search_space


def test_the_search_run_carries_its_settings_a_description_and_the_best_table(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "smoke", str(tmp_path / "artifacts"))
    run_id = tracking.parent_run(client, experiment, "smoke", {})
    space = load_search_space("smoke").narrow(tasks=["rte"])
    planned = plan(space)
    parent.describe(client, run_id, space, planned, space.run_settings())
    parent.describe(client, run_id, space, planned, space.run_settings())  # a resume: params are written once
    log_trial(client, experiment, "a", "tiny-bert", "rte", "base", {"accuracy": [0.5]}, learning_rate=1e-3)
    log_trial(client, experiment, "b", "tiny-bert", "rte", "istar", {"accuracy": [0.6]}, lam=-1.0, zeta=0.2)
    log_trial(client, experiment, "c", "tiny-bert", "rte", "istar", {"accuracy": [0.6, 0.6]}, lam=-1.0,
              zeta=0.2)  # a tie the search breaks by fewer epochs: "b" is chosen
    parent.log_best(uri, "smoke", run_id, planned, simulated=False)
    parent.log_best(uri, "smoke", run_id, planned, simulated=False)  # a resume's end: the table replaced, not appended
    run = client.get_run(run_id)
    assert run.data.params["algorithm"] == "grid" and run.data.params["trials"] == "4"
    assert run.data.params["setting.max_length"] == "48" and run.data.params["tasks"] == "rte"
    note = run.data.tags[tracking.NOTE_TAG]
    assert note.startswith("**smoke**") and "4 configurations in 2 model × task × method groups" in note
    assert "| tiny-bert | rte | istar | accuracy | 0.6 | istar λ=-1 ζ=0.2" in note
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {parent.BEST_TABLE, "best_configurations.md"} <= artifacts
    table = json.loads(open(client.download_artifacts(run_id, parent.BEST_TABLE)).read())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert [(r["method"], r["score"]) for r in rows] == [("base", 0.5), ("istar", 0.6)]
    # The runs the search chose, marked on their runs (the saved view's first column), ties broken as it broke them.
    marked = {r.data.tags[tracking.TAG_TRIAL_ID]: r.data.tags.get(tracking.TAG_CHOSEN)
              for r in client.search_runs([experiment], f"tags.`{tracking.TAG_ROLE}` = 'trial'")}
    assert marked == {"a": "yes (epoch 1)", "b": "yes (epoch 1)", "c": None}
    log_trial(client, experiment, "d", "tiny-bert", "rte", "istar", {"accuracy": [0.7]}, lam=-3.0, zeta=0.2)
    parent.log_best(uri, "smoke", run_id, planned, simulated=False)  # a resumed search's end: d is chosen, not b
    marked = {r.data.tags[tracking.TAG_TRIAL_ID]: r.data.tags.get(tracking.TAG_CHOSEN)
              for r in client.search_runs([experiment], f"tags.`{tracking.TAG_ROLE}` = 'trial'")}
    assert marked == {"a": "yes (epoch 1)", "b": None, "c": None, "d": "yes (epoch 1)"}
    assert rows[0]["lam"] is None and rows[1]["lam"] == "-1.0"  # Base has no λ; I-STAR's as logged
    assert json.loads(run.data.tags[parent.MLFLOW_LOGGED_ARTIFACTS]) == [{"path": parent.BEST_TABLE, "type": "table"}]
    # The filter MlflowClient.load_table finds a run's tables with.
    found = client.search_runs([experiment], f"tags.`{parent.MLFLOW_LOGGED_ARTIFACTS}` LIKE "
                                             f"'%\"path\"%:%\"{parent.BEST_TABLE}\",%\"type\"%:%\"table\"%'")
    assert [r.info.run_id for r in found] == [run_id]


def test_the_saved_view_shows_the_searched_columns_and_every_run_in_the_charts(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "smoke", str(tmp_path / "artifacts"))
    space = load_search_space("smoke").narrow(tasks=["rte"])
    link = parent.share_view(client, experiment, space)
    view = json.loads(client.get_experiment(experiment).tags[f"mlflow.sharedViewState.{parent.SHARED_VIEW}"])
    assert view["runsHiddenMode"] == "SHOW_ALL"  # MLflow's charts draw the first 10 runs otherwise
    assert view["orderByKey"] == "metrics.`accuracy`"
    # The chosen mark first, the choosing value next, the status before the searched values (seen at 1400 px).
    assert view["selectedColumns"][:3] == ["tags.`istar_tune.chosen`", "metrics.`accuracy`", "tags.`istar_tune.status`"]
    assert link.startswith(f"#/experiments/{experiment}/runs?viewStateShareKey={parent.SHARED_VIEW}")


def test_a_seeds_stages_view_keeps_the_seeds_folded_under_their_aggregate(tmp_path):
    """MLflow folds runs under their parent only in an order that is not a metric's: the view of a seeds stage is
    ordered by start time, the aggregates' values its first columns."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    experiment = tracking.ensure_experiment(client, "seeds", str(tmp_path / "artifacts"))
    space = load_search_space("minilm_sst2_seeds")
    assert space.stage == "seeds"
    parent.share_view(client, experiment, space)
    tags = client.get_experiment(experiment).tags
    view = json.loads(tags[f"mlflow.sharedViewState.{parent.SHARED_VIEW}"])
    assert view["orderByKey"] == "attributes.start_time" and not view["orderByKey"].startswith("metrics.")
    assert view["selectedColumns"][:3] == ["metrics.`seeds_mean`", "metrics.`seeds_ci_low`", "metrics.`seeds_ci_high`"]
    assert "params.`seed`" in view["selectedColumns"]
    assert "folded under its aggregate run" in tags[tracking.NOTE_TAG]

