"""The robust statistics against independent computations: P(X > Y) against scipy's Mann-Whitney U, the IQM by hand,
the bootstrap intervals against a bootstrap written here with numpy (another generator: equal within the resampling
error), the seeds a t-interval needs by hand; the table pairs by seed, for a shipped task and one's own, and the
command prints the paper's and the robust tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.results.robust import (
    ACROSS_TASKS,
    interquartile_mean,
    mean_interval,
    probability_of_improvement,
    seeds_to_exclude_zero,
    stratified_interval,
)
from istar_tune.results.tables import build_table


def _bootstrap_means(values: np.ndarray, draws: int = 20000, seed: int = 123) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return values[rng.integers(0, values.size, size=(draws, values.size))].mean(axis=1)


@pytest.mark.parametrize("ours, theirs", [([3.0, 1.0, 4.0, 1.0, 5.0], [2.0, 7.0, 1.0, 8.0]), ([1.0, 1.0], [1.0, 1.0]),
                                          ([9.0, 8.0, 7.0], [1.0, 2.0])])
def test_the_probability_of_improvement_is_the_mann_whitney_u_over_all_pairs(ours, theirs):
    expected = stats.mannwhitneyu(ours, theirs).statistic / (len(ours) * len(theirs))
    assert probability_of_improvement(np.array(ours), np.array(theirs)) == pytest.approx(expected)


def test_the_interquartile_mean_is_the_mean_of_the_middle_half():
    assert interquartile_mean(np.array([8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0])) == pytest.approx(4.5)  # 3..6
    assert interquartile_mean(np.array([0.0, 0.0, 1.0, 1.0, 100.0, -100.0, 1.0, 0.0])) == pytest.approx(0.5)


def test_a_percentile_interval_of_few_pairs_matches_a_numpy_bootstrap():
    differences = np.array([1.5, -0.5, 2.0])
    low, high, method = mean_interval(differences)
    assert method == "percentile bootstrap"
    means = _bootstrap_means(differences)
    assert low == pytest.approx(np.quantile(means, 0.025), abs=0.05)
    assert high == pytest.approx(np.quantile(means, 0.975), abs=0.05)


def test_five_pairs_or_more_take_bca_whose_interval_holds_the_mean_and_is_not_the_percentile_one():
    differences = np.array([0.2, 0.4, 0.1, 3.5, 0.3, 0.25])  # skewed: BCa shifts toward the long tail
    low, high, method = mean_interval(differences)
    assert method == "BCa bootstrap" and low < differences.mean() < high
    percentile = stats.bootstrap((differences,), np.mean, method="percentile", n_resamples=9999,
                                 rng=np.random.default_rng(0)).confidence_interval
    assert (low, high) != (pytest.approx(percentile.low), pytest.approx(percentile.high))
    assert mean_interval(np.array([0.5])) is None
    assert mean_interval(np.array([0.5, 0.5, 0.5])) == (0.5, 0.5, "none (every pair differs alike)")


def test_the_stratified_interval_resamples_within_each_task():
    by_task = [np.array([1.0, 2.0, 3.0]), np.array([10.0, 11.0, 12.0, 13.0])]
    low, high = stratified_interval(by_task, resamples=4000)
    rng = np.random.default_rng(99)
    estimates = []
    for _ in range(4000):  # written again: each task keeps its own count of values
        pooled = np.sort(np.concatenate([v[rng.integers(0, v.size, v.size)] for v in by_task]))
        cut = int(math.floor(0.25 * pooled.size))
        estimates.append(pooled[cut:pooled.size - cut].mean())
    assert low == pytest.approx(np.quantile(estimates, 0.025), abs=0.3)
    assert high == pytest.approx(np.quantile(estimates, 0.975), abs=0.3)


def test_the_seeds_a_t_interval_needs_to_exclude_zero():
    differences = np.array([3.0, -1.0, 1.0, 3.0, -1.0])  # mean 1, SD 2
    assert (np.mean(differences), np.std(differences, ddof=1)) == (1.0, 2.0)
    needed = seeds_to_exclude_zero(differences)
    half_width = [stats.t.ppf(0.975, n - 1) * 2 / math.sqrt(n) for n in (needed, needed - 1)]
    assert half_width[0] < 1 <= half_width[1]
    assert needed == 18
    assert seeds_to_exclude_zero(np.array([1.0, -1.0])) is None  # no difference observed


TICKETS = {"name": "tickets", "display_name": "Tickets", "problem_type": "classification", "metric": "mcc"}
SEEDS = {("rte", "base"): [0.60, 0.62, 0.58, 0.61, 0.59], ("rte", "istar"): [0.66, 0.69, 0.63, 0.67, 0.65],
         ("tickets", "base"): [0.30, 0.35, 0.31, 0.28], ("tickets", "istar"): [0.31, 0.33, 0.32, 0.30, 0.36]}


@pytest.fixture
def stage(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "stage", str(tmp_path / "artifacts"))
    for (task, method), values in SEEDS.items():
        metric = "mcc" if task == "tickets" else "accuracy"
        for seed, value in enumerate(values, start=1):
            run = log_trial(client, exp, f"{task}-{method}-{seed}", "minilm", task, method, {metric: [value]},
                            stage="seeds", seed=seed)
            if task == "tickets":
                client.set_tag(run, tracking.TAG_TASK, json.dumps(TICKETS))
    return uri


def test_the_robust_table_pairs_by_seed_for_a_shipped_task_and_ones_own(stage):
    table = build_table(stage, "stage", kind="seeds", stats="robust")
    rows = {row.task: row for row in table.itertuples()}
    assert set(rows) == {"rte", "tickets", ACROSS_TASKS} and set(table.method) == {"I-STAR"}
    rte = 100 * (np.array(SEEDS[("rte", "istar")]) - np.array(SEEDS[("rte", "base")]))
    assert rows["rte"].n == 5 and rows["rte"].difference == round(rte.mean(), 2)
    assert rows["rte"].interval == "BCa bootstrap" and rows["rte"].ci_low > 0 and rows["rte"].note == ""
    assert rows["rte"].p_improvement == 1.0  # every I-STAR run above every Base run
    tickets = 100 * (np.array(SEEDS[("tickets", "istar")][:4]) - np.array(SEEDS[("tickets", "base")]))
    assert rows["tickets"].n == 4 and rows["tickets"].difference == round(tickets.mean(), 2)  # seed 5 has no partner
    assert rows["tickets"].interval == "percentile bootstrap" and rows["tickets"].ci_low <= 0
    assert rows["tickets"].note.startswith("the interval includes 0; about ")
    pooled = np.concatenate([rte, tickets])
    assert rows[ACROSS_TASKS].n == 9 and rows[ACROSS_TASKS].difference == round(interquartile_mean(pooled), 2)
    assert table.attrs["caption"].startswith("Against Base, paired by seed")


def test_the_command_prints_the_papers_table_and_the_robust_one(stage, capsys):
    assert main(["table", "--tracking-uri", stage, "--experiment", "stage", "--kind", "seeds", "--stats", "all"]) == 0
    out = capsys.readouterr().out
    assert out.index("| model | method | RTE |") < out.index("Mean ± SD") < out.index("| model | method | task |")
    assert "Against Base, paired by seed" in out and "IQM over tasks" in out
    with pytest.raises(ConfigError, match="robust statistics compare a seeds stage's methods with Base"):
        build_table(stage, "stage", kind="best", stats="robust")
    assert main(["table", "--tracking-uri", stage, "--experiment", "stage", "--kind", "seeds", "--stats", "all",
                 "--format", "csv", "--output", "x.csv"]) == 2
    assert "--stats all prints two tables" in capsys.readouterr().err


def test_a_study_is_refused_not_paired_across_the_values_it_varies(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "study", str(tmp_path / "artifacts"))
    for lam in (-1.0, 1.0):
        for seed in (1, 2):
            log_trial(client, exp, f"i{lam}{seed}", "minilm", "rte", "istar", {"accuracy": [0.6]}, stage="seeds",
                      seed=seed, lam=lam)
            log_trial(client, exp, f"b{lam}{seed}", "minilm", "rte", "base", {"accuracy": [0.6]}, stage="seeds",
                      seed=seed)
    with pytest.raises(ConfigError, match="differ in lam"):
        build_table(uri, "study", kind="seeds", stats="robust")
