"""The paired comparison against references written here: the t-interval and p from the formula, the exact Wilcoxon
p by enumerating every sign pattern, the power from the noncentral t distribution, Holm's adjustment by hand, the
effect in pooled-SD units by hand; and the promise itself: the paired t-interval covers 95 % at 3 and 5 pairs, by
simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from istar_tune.results import paired


def test_the_paired_t_interval_and_p_from_the_formula():
    d = np.array([1.5, -0.5, 2.0, 0.7])
    mean, se = d.mean(), d.std(ddof=1) / 2
    half = stats.t.ppf(0.975, 3) * se
    found = paired.paired_t(d)
    assert (found.mean, found.low, found.high) == pytest.approx((mean, mean - half, mean + half))
    assert found.p == pytest.approx(2 * stats.t.sf(abs(mean / se), 3))
    assert math.isnan(paired.paired_t([0.4]).low)


def _signed_rank_p(d: np.ndarray) -> float:
    """Every one of the 2ⁿ sign patterns of the ranks equally likely under no difference."""
    ranks = stats.rankdata(np.abs(d))
    observed = ranks[d > 0].sum()
    total = ranks.sum()
    sums = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product([0, 1], repeat=d.size)]
    extreme = min(observed, total - observed)
    return min(1.0, 2 * np.mean([s <= extreme + 1e-9 for s in sums]))


@pytest.mark.parametrize("d", [[0.3, 1.2, -0.4, 2.1, 0.9], [1.0, 2.0, 3.0, 4.0, 5.0], [-0.2, 0.5, 0.1]])
def test_the_exact_wilcoxon_p_enumerates_every_sign(d):
    assert paired.wilcoxon_p(d) == pytest.approx(_signed_rank_p(np.array(d)))


def test_five_pairs_can_never_reach_005_with_the_signed_rank_test():
    assert paired.smallest_wilcoxon_p(5) == 0.0625 and paired.wilcoxon_p([1, 2, 3, 4, 5]) == pytest.approx(0.0625)
    assert paired.smallest_wilcoxon_p(6) == 0.03125


def _power(n: int, difference: float, sd: float) -> float:
    """The two-sided paired t-test's power from the noncentral t distribution."""
    critical = stats.t.ppf(0.975, n - 1)
    shift = difference / sd * math.sqrt(n)
    return stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_detectable_difference_has_80_percent_power(n):
    found = paired.detectable(n, 1.3)
    assert _power(n, found, 1.3) == pytest.approx(0.8, abs=1e-4)


def test_the_pairs_a_difference_needs():
    needed = paired.pairs_needed(1.0, 1.5)
    assert _power(needed, 1.0, 1.5) >= 0.8 > _power(needed - 1, 1.0, 1.5)
    assert paired.pairs_needed(0.0, 1.0) is None


def test_holm_by_hand():
    raw = [0.01, 0.04, math.nan, 0.03]
    # ordered 0.01, 0.03, 0.04 over 3 tests: 0.03, 0.06, 0.06 (monotone)
    assert paired.holm(raw)[:2] == pytest.approx([0.03, 0.06]) and paired.holm(raw)[3] == pytest.approx(0.06)
    assert math.isnan(paired.holm(raw)[2])


def test_the_effect_in_pooled_seed_sds_and_its_mean_over_tasks():
    ours, theirs = np.array([80.0, 82.0, 81.0]), np.array([79.0, 80.0, 78.0])
    sd = math.sqrt((np.var(ours, ddof=1) + np.var(theirs, ddof=1)) / 2)
    assert paired.effect(ours, theirs) == pytest.approx(2.0 / sd)
    other = (np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.5, 2.5, 3.0, 3.0]))
    both = paired.across_tasks([ours, other[0]], [theirs, other[1]])
    assert both == pytest.approx((paired.effect(ours, theirs) + paired.effect(*other)) / 2)  # tasks weigh alike


@pytest.mark.parametrize("n", [3, 5])
def test_the_paired_t_interval_covers_95_percent_at_few_pairs(n):
    """The promise of the primary interval, simulated: 4,000 data sets of n normal differences (true mean 0.7)."""
    rng = np.random.default_rng(n)
    covered = [(f := paired.paired_t(row)).low <= 0.7 <= f.high for row in rng.normal(0.7, 1.3, size=(4000, n))]
    error = math.sqrt(0.95 * 0.05 / 4000)
    assert abs(np.mean(covered) - 0.95) < 4 * error
