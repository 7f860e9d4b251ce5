"""A seeds stage's aggregate runs: one per model × task × method, for a shipped task and one's own, the parent of its
seed runs, holding the mean, SD, n, the 95 % t-interval (computed again here with numpy and scipy) and the
comparison with Base; written again, updated and never duplicated; a search's experiment refused."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from scipy import stats

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.results.aggregates import AGGREGATE_ROLE, TAG_STATISTICS, log_seed_aggregates
from istar_tune.testing import MlflowServer
from istar_tune.tracking import MODEL_TRAINING

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BASE = {"rte": [0.60, 0.62, 0.58], "tickets": [0.30, 0.33, 0.31]}
ISTAR = {"rte": [0.70, 0.72, 0.71], "tickets": [0.31, 0.29, 0.35]}
TICKETS = {"name": "tickets", "display_name": "Tickets", "problem_type": "classification", "metric": "mcc"}


def _seeds(log_trial, client, exp, task, method, values, first_seed=1):
    metric = "mcc" if task == "tickets" else "accuracy"
    for seed, value in enumerate(values, start=first_seed):
        run = log_trial(client, exp, f"{task}-{method}-{seed}", "minilm", task, method, {metric: [value]},
                        stage="seeds", seed=seed, learning_rate=2e-5)
        if task == "tickets":
            client.set_tag(run, tracking.TAG_TASK, json.dumps(TICKETS))


@pytest.fixture
def seeds_store(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "stage", str(tmp_path / "artifacts"))
    for task in BASE:
        _seeds(log_trial, client, exp, task, "base", BASE[task])
        _seeds(log_trial, client, exp, task, "istar", ISTAR[task])
    return uri, client, exp


def _aggregates(client, exp) -> dict:
    return {run.data.tags[tracking.TAG_GROUP]: run
            for run in tracking.find_runs(client, exp, **{tracking.TAG_ROLE: AGGREGATE_ROLE})}


def test_each_group_gets_one_aggregate_parent_of_its_seeds_with_the_tables_numbers(seeds_store, log_trial):
    uri, client, exp = seeds_store
    written = log_seed_aggregates(uri, "stage")
    assert set(written) == {"minilm/rte/base", "minilm/rte/istar", "minilm/tickets/base", "minilm/tickets/istar"}
    found = _aggregates(client, exp)
    assert set(found) == set(written)
    for key, run in found.items():
        _, task, method = key.split("/")
        values = 100 * np.array((ISTAR if method == "istar" else BASE)[task])
        metrics = run.data.metrics
        low, high = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
        assert metrics["seeds_mean"] == pytest.approx(values.mean()) and metrics["seeds_n"] == 3
        assert metrics["seeds_std"] == pytest.approx(values.std(ddof=1))
        assert (metrics["seeds_ci_low"], metrics["seeds_ci_high"]) == (pytest.approx(low), pytest.approx(high))
        said = run.data.tags[TAG_STATISTICS]
        assert "Student's t interval" in said and "SD, not SEM" in said
        assert run.data.params["learning_rate"] == "2e-05" and "seed" not in run.data.params
        assert run.info.status == "FINISHED" and run.info.run_name == f"{key}: 3 seeds"
        if method == "istar":
            base = 100 * np.array(BASE[task])
            assert metrics["vs_base_difference"] == pytest.approx(values.mean() - base.mean())
        else:
            assert "vs_base_difference" not in metrics
    # Welch, one-sided, Holm over the model's two tasks: rte clearly better, tickets not
    p = [stats.ttest_ind(ISTAR[t], BASE[t], equal_var=False, alternative="greater").pvalue for t in ("rte", "tickets")]
    assert p[0] * 2 < 0.05 and p[1] > 0.05
    assert found["minilm/rte/istar"].data.metrics["vs_base_significant"] == 1.0
    assert found["minilm/tickets/istar"].data.metrics["vs_base_significant"] == 0.0
    for seed in tracking.find_runs(client, exp, **{tracking.TAG_ROLE: "trial"}):  # folded under their group's
        assert seed.data.tags[tracking.TAG_PARENT] == written[seed.data.tags[tracking.TAG_GROUP]]


def test_written_again_each_aggregate_is_updated_never_duplicated(seeds_store, log_trial):
    uri, client, exp = seeds_store
    first = log_seed_aggregates(uri, "stage")
    _seeds(log_trial, client, exp, "rte", "base", [0.70], first_seed=4)  # a fourth seed, run since
    again = log_seed_aggregates(uri, "stage")
    assert again == first and len(_aggregates(client, exp)) == 4
    updated = client.get_run(again["minilm/rte/base"])
    assert updated.data.metrics["seeds_n"] == 4 and updated.info.run_name == "minilm/rte/base: 4 seeds"
    assert updated.data.metrics["seeds_mean"] == pytest.approx(100 * np.mean([*BASE["rte"], 0.70]))
    assert len(tracking.trial_runs(uri, "stage")) == 13  # the aggregates are not trials: no table counts them


def test_a_search_is_refused_with_what_aggregates_summarise(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "grid", str(tmp_path / "artifacts"))
    log_trial(client, exp, "t1", "minilm", "rte", "base", {"accuracy": [0.6]})
    with pytest.raises(ConfigError, match="holds no seed runs: aggregates summarise a seeds stage's seeds"):
        log_seed_aggregates(uri, "grid")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_runs_page_folds_each_groups_seeds_and_the_description_links_the_groups_side_by_side(log_trial):
    import re

    with MlflowServer() as server:
        client = tracking.client(server.uri)
        exp = tracking.ensure_experiment(client, "stage")
        client.set_experiment_tag(exp, tracking.NOTE_TAG, "**stage**: what the search wrote")
        for task in BASE:
            _seeds(log_trial, client, exp, task, "base", BASE[task])
            _seeds(log_trial, client, exp, task, "istar", ISTAR[task])
        written = log_seed_aggregates(server.uri, "stage")
        log_seed_aggregates(server.uri, "stage")  # again: one link, not two
        seeds = [run.info.run_name for run in tracking.find_runs(client, exp, **{tracking.TAG_ROLE: "trial"})]

        def render(path: str) -> str:
            return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1900,900",
                                   "--virtual-time-budget=20000", "--dump-dom", f"{server.uri}/{path}"],
                                  capture_output=True, text=True, timeout=120).stdout

        page = render(f"#/experiments/{exp}/runs?{MODEL_TRAINING}")
        note = client.get_experiment(exp).tags[tracking.NOTE_TAG]
        assert note.startswith("**stage**: what the search wrote") and note.count("The seeds, aggregated") == 1
        link = re.search(r'href="[^"]*?(#/compare-runs\?runs=[^"]+)"', page)
        assert link, "the description shows no link comparing the groups"
        compared = render(link.group(1).replace("&amp;", "&"))
    assert ">Run Name<" in page
    for key in written:  # a row per group, named by it
        assert f"{key}: 3 seeds" in page and f"{key}: 3 seeds" in compared, key
    assert not any(f">{name}<" in page for name in seeds)  # each seed run folded under its group's row
    for metric in ("seeds_mean", "seeds_ci_low", "vs_base_difference"):  # side by side, by their numbers
        assert metric in compared, metric


def test_a_shard_writes_the_aggregates_of_the_groups_it_ran_compared_with_every_seed_run(seeds_store):
    uri, client, exp = seeds_store
    mine = log_seed_aggregates(uri, "stage", only={("minilm", "rte", "istar")})
    assert list(mine) == ["minilm/rte/istar"] and set(_aggregates(client, exp)) == {"minilm/rte/istar"}
    # Base's seeds and the model's other task counted all the same: Holm over two tasks, as the whole stage's
    assert _aggregates(client, exp)["minilm/rte/istar"].data.metrics["vs_base_significant"] == 1.0
    rest = log_seed_aggregates(uri, "stage", only={("minilm", "tickets", "base")})
    link = client.get_experiment(exp).tags[tracking.NOTE_TAG]
    assert mine["minilm/rte/istar"] in link and rest["minilm/tickets/base"] in link  # the link holds both shards'
