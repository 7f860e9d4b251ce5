"""The bootstrap intervals against brute force: every one of the nⁿ index tuples of a resample enumerated with
itertools (the module enumerates multisets with multinomial weights), P(X > Y) against scipy's Mann-Whitney U, and
a sampled interval against numpy's quantiles of the same draws; an exact interval depends on no generator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from istar_tune.results import resampling


def _brute_force_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Every resample of ``values`` as an index tuple (nⁿ of them, equally likely), the interval's ends by the
    rule the docs state: the smallest mean whose cumulative share reaches 2.5 %, the largest whose upper tail does."""
    n = values.size
    means = np.sort([values[list(idx)].mean() for idx in itertools.product(range(n), repeat=n)])
    tail = (1 - level) / 2 * means.size
    low = means[int(np.ceil(tail - 1e-9)) - 1]
    high = means[means.size - int(np.ceil(tail - 1e-9))]
    return float(low), float(high)


@pytest.mark.parametrize("values", [[1.5, -0.5, 2.0], [0.3, -1.2, 0.8, 2.2], [0.4, 0.1, -0.3, 1.7, 0.9],
                                    [3.0, 3.0, -1.0, 0.5, 0.5]])
def test_the_exact_interval_is_the_brute_force_one(values):
    values = np.array(values)
    low, high = resampling.mean_interval(values[None])
    assert (float(low[0]), float(high[0])) == pytest.approx(_brute_force_interval(values), abs=1e-12)


def test_three_pairs_give_the_smallest_and_largest_difference():
    """With 3 pairs the 95 % percentile interval is [min, max]: each end has probability 1/27 > 2.5 %."""
    values = np.array([0.2, 1.4, 0.9])
    low, high = resampling.mean_interval(values[None])
    assert (low[0], high[0]) == pytest.approx((0.2, 1.4), abs=1e-12)


def test_an_exact_interval_does_not_depend_on_the_generator():
    values = np.random.default_rng(5).normal(size=(1, 5))
    found = {tuple(np.concatenate(resampling.mean_interval(values, seed=seed))) for seed in range(6)}
    assert len(found) == 1
    theirs = np.random.default_rng(6).normal(size=(1, 5))
    found = {tuple(np.concatenate(resampling.improvement_interval(values, theirs, seed=seed))) for seed in range(3)}
    assert len(found) == 1


def test_a_sampled_interval_is_the_quantiles_of_its_draws():
    values = np.random.default_rng(1).normal(size=12)
    picks = np.random.default_rng(resampling.SEED).integers(0, 12, size=(resampling.RESAMPLES, 12))
    means = values[picks].mean(axis=1)
    low, high = resampling.mean_interval(values[None])
    assert low[0] == pytest.approx(np.quantile(means, 0.025)) and high[0] == pytest.approx(np.quantile(means, 0.975))


def test_the_probability_of_improvement_is_the_mann_whitney_u_over_all_pairs():
    ours, theirs = np.array([3.0, 1.0, 4.0, 1.0, 5.0]), np.array([2.0, 7.0, 1.0, 8.0])
    expected = stats.mannwhitneyu(ours, theirs).statistic / (ours.size * theirs.size)
    assert resampling.improvement(ours[None], theirs[None])[0] == pytest.approx(expected)


def test_the_exact_improvement_interval_is_the_brute_force_one():
    ours, theirs = np.array([0.3, 1.1, -0.4]), np.array([0.0, 0.5, 0.2])
    values = []
    for i in itertools.product(range(3), repeat=3):
        for j in itertools.product(range(3), repeat=3):
            values.append(resampling.improvement(ours[list(i)][None], theirs[list(j)][None])[0])
    values = np.sort(values)
    tail = int(np.ceil(0.025 * values.size - 1e-9))
    low, high = resampling.improvement_interval(ours[None], theirs[None])
    assert (low[0], high[0]) == pytest.approx((values[tail - 1], values[values.size - tail]))
