"""Expected validation performance: the closed form equals hand-made answers and a Monte-Carlo estimate of the
same draws (ties broken at random) within its standard error; the table reads a search's finished runs, chosen by
held-out data where the runs hold some, for a shipped task and one's own, and refuses a seeds stage."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.results.budget import budgets, expected_best, expected_best_without_replacement
from istar_tune.results.tables import build_table


def _monte_carlo(choose, report, n, draws=200_000, seed=0):
    """The mean and standard deviation of ``report`` at the best ``choose`` of ``n`` draws, by drawing."""
    rng = np.random.default_rng(seed)
    choose, report = np.asarray(choose, float), np.asarray(report, float)
    picked = rng.integers(0, choose.size, size=(draws, n))
    noise = rng.random((draws, n))  # a tie goes to a member at random
    best = np.lexsort((noise, choose[picked]), axis=1)[:, -1]
    values = report[picked[np.arange(draws), best]]
    return values.mean(), values.std(), values.std() / math.sqrt(draws)


def test_two_values_by_hand():
    assert expected_best([0.0, 1.0], [0.0, 1.0], 1) == (0.5, 0.5)
    mean, sd = expected_best([0.0, 1.0], [0.0, 1.0], 2)  # max is 1 unless both draws are 0 (1/4)
    assert mean == pytest.approx(0.75) and sd == pytest.approx(math.sqrt(0.75 - 0.75 ** 2))
    # one tie: the chosen configuration is any of the three, whatever n
    mean, sd = expected_best([3.0, 3.0, 3.0], [1.0, 2.0, 6.0], 5)
    assert mean == pytest.approx(3.0) and sd == pytest.approx(math.sqrt((1 + 4 + 36) / 3 - 9))


def test_dodge_et_als_expected_maximum_written_from_the_paper():
    values = np.array([71.2, 68.0, 74.5, 70.1, 73.3, 69.9, 72.8])
    ordered, total = np.sort(values), len(values)
    for n in (1, 2, 3, 7, 20):
        paper = sum(v * ((i / total) ** n - ((i - 1) / total) ** n) for i, v in enumerate(ordered, start=1))
        assert expected_best(values, values, n)[0] == pytest.approx(paper, abs=1e-12)


@pytest.mark.parametrize("n", [1, 3, 8])
def test_the_closed_form_is_a_monte_carlo_estimate_within_its_standard_error(n):
    rng = np.random.default_rng(7)
    choose = np.round(rng.normal(80, 3, size=12), 0)  # rounded: ties, as a grid of coarse scores has
    report = choose + rng.normal(0, 1.5, size=12)  # the dev score of each configuration
    mean, sd = expected_best(choose, report, n)
    sampled, sampled_sd, error = _monte_carlo(choose, report, n)
    assert abs(mean - sampled) < 4 * error and sd == pytest.approx(sampled_sd, rel=0.02)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6])
def test_without_replacement_is_the_mean_over_every_subset(n):
    choose = np.array([0.7, 0.9, 0.8, 0.9, 0.6, 0.75])  # a tie at 0.9: the tables take the one preferred first
    report = np.array([0.71, 0.86, 0.79, 0.93, 0.58, 0.7])
    preference = [5, 3, 4, 1, 0, 2]  # configuration 3 sorts before configuration 1
    picks = [max(subset, key=lambda i: (choose[i], -preference[i]))
             for subset in itertools.combinations(range(6), n)]
    mean, sd = expected_best_without_replacement(choose, report, n, preference)
    assert mean == pytest.approx(np.mean(report[picks])) and sd == pytest.approx(np.std(report[picks]))
    assert expected_best_without_replacement(choose, choose, 6)[0] == 0.9  # all six drawn: the best, always


def test_the_rows_double_to_the_whole_search():
    assert budgets(1) == [1] and budgets(12) == [1, 2, 4, 8, 12] and budgets(16) == [1, 2, 4, 8, 16]


def _search(log_trial, tmp_path, held_out: bool):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "s", str(tmp_path / "artifacts"))
    dev = [0.80, 0.84, 0.79, 0.90]
    held = [0.70, 0.88, 0.75, 0.60]  # held-out data prefers the second configuration, the dev set the fourth
    for i, (d, h) in enumerate(zip(dev, held)):
        extra = {"holdout_accuracy": [h]} if held_out else {}
        log_trial(client, exp, f"r{i}", "minilm", "rte", "base", {"accuracy": [d], **extra},
                  learning_rate=1e-5 * (i + 1))
        run = log_trial(client, exp, f"o{i}", "minilm", "tickets", "base", {"mcc": [d - 0.3], **{
            k.replace("accuracy", "mcc"): [v - 0.3] for k, (v,) in extra.items()}}, learning_rate=1e-5 * (i + 1))
        client.set_tag(run, tracking.TAG_TASK, json.dumps({"name": "tickets", "display_name": "Tickets",
                                                          "problem_type": "classification", "metric": "mcc"}))
    log_trial(client, exp, "x", "minilm", "rte", "base", {"accuracy": [0.99]}, status="failed")  # not drawn
    return uri, dev, held


@pytest.mark.parametrize("held_out", [False, True])
def test_the_table_draws_each_groups_finished_configurations_by_the_value_that_chooses(log_trial, tmp_path, held_out):
    uri, dev, held = _search(log_trial, tmp_path, held_out)
    table = build_table(uri, "s", kind="budget")
    assert table.attrs["caption"].startswith("Expected validation performance: the expected best `chosen` score of n "
                                             "configurations drawn at random, without replacement")
    for task, shift in (("rte", 0.0), ("tickets", 0.3)):  # a shipped task and one of one's own
        rows = table[table.task == task]
        assert list(rows.n) == [1, 2, 4] and set(rows.configurations) == {4}
        choose = np.array(held if held_out else dev) - shift
        report = np.array(dev) - shift
        for n, chosen, dev_mean in zip(rows.n, rows.chosen, rows.dev):  # no ties: any preference
            assert chosen == round(100 * expected_best_without_replacement(choose, choose, n)[0], 2)
            assert dev_mean == round(100 * expected_best_without_replacement(choose, report, n)[0], 2)
        assert set(rows.chosen_by) == {"holdout" if held_out else "dev"} and list(rows.epochs) == [1.0, 2.0, 4.0]
    if held_out:  # the dev score of what held-out data chose, not the dev set's own best
        last = table[(table.task == "rte") & (table.n == 4)].iloc[0]
        assert last.dev < 100 * max(dev)


def test_a_seeds_stage_is_refused_with_what_to_tabulate(log_trial, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "seeds", str(tmp_path / "artifacts"))
    log_trial(client, exp, "s1", "minilm", "rte", "base", {"accuracy": [0.8]}, stage="seeds", seed=1)
    with pytest.raises(ConfigError, match="a seeds stage re-runs one configuration per group: tabulate the search"):
        build_table(uri, "seeds", kind="budget")
