"""The paired comparison of a method with Base over the same seeds (arrays in, numbers out): the mean difference with
its Student t-interval and two-sided p, the exact Wilcoxon signed-rank p, the effect in units of the pooled seed SD,
what n pairs can detect (power of the paired t-test, statsmodels), Holm's adjustment (statsmodels), and the mean of
per-task effects over tasks with its stratified bootstrap. scipy and statsmodels compute; nothing here reads MLflow.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from istar_tune.results.resampling import LEVEL, RESAMPLES, SEED

ALPHA = 0.05
"""The two-sided level of every test (Holm-adjusted where several are made)."""
POWER = 0.8
"""The power :func:`detectable` and :func:`pairs_needed` plan for."""


class PairedT(NamedTuple):
    mean: float
    low: float
    high: float
    p: float


def paired_t(differences) -> PairedT:
    """The mean of ``differences``, its Student t-interval at :data:`~istar_tune.results.resampling.LEVEL` and the
    two-sided one-sample t-test's p (scipy); with every difference equal, a zero-width interval and p 0 (or 1 at 0)."""
    from scipy import stats

    values = np.asarray(differences, dtype=float)
    mean = float(np.mean(values))
    if values.size < 2:
        return PairedT(mean, math.nan, math.nan, math.nan)
    if np.ptp(values) <= 1e-9 * max(1.0, float(np.max(np.abs(values)))):  # every difference one value, up to rounding
        return PairedT(mean, mean, mean, 1.0 if abs(mean) <= 1e-12 else 0.0)
    test = stats.ttest_1samp(values, 0.0)
    found = test.confidence_interval(LEVEL)
    return PairedT(mean, float(found.low), float(found.high), float(test.pvalue))


def wilcoxon_p(differences) -> float:
    """The exact two-sided Wilcoxon signed-rank p of ``differences`` (scipy; zero differences dropped, as Wilcoxon
    did); NaN when none is left."""
    from scipy import stats

    values = np.asarray(differences, dtype=float)
    values = values[values != 0]
    if values.size == 0:
        return math.nan
    return float(stats.wilcoxon(values, method="exact").pvalue)


def smallest_wilcoxon_p(n: int) -> float:
    """The smallest two-sided p the exact signed-rank test can give with ``n`` pairs (every sign alike): 2 / 2ⁿ."""
    return min(1.0, 2.0 / 2 ** n)


def pooled_sd(ours, theirs) -> float:
    """√((s²_ours + s²_theirs) / 2), the seed SD both share (NaN below two runs a side)."""
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    if ours.size < 2 or theirs.size < 2:
        return math.nan
    return math.sqrt((np.var(ours, ddof=1) + np.var(theirs, ddof=1)) / 2)


def effect(ours, theirs) -> float:
    """The mean paired difference in units of the pooled seed SD (NaN where that SD is 0 or unknown)."""
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    sd = pooled_sd(ours, theirs)
    return float(np.mean(ours - theirs)) / sd if sd > 0 else math.nan


def detectable(n: int, sd: float, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest true mean difference the two-sided paired t-test at ``alpha`` detects with ``power`` from ``n``
    pairs whose differences have SD ``sd`` (statsmodels' power of the one-sample t-test); NaN below 2 pairs."""
    from statsmodels.stats.power import TTestPower

    if n < 2 or not sd > 0:
        return math.nan
    return float(TTestPower().solve_power(nobs=n, alpha=alpha, power=power, alternative="two-sided")) * sd


def pairs_needed(difference: float, sd: float, power: float = POWER, alpha: float = ALPHA,
                 most: int = 10_000) -> int | None:
    """The fewest pairs whose two-sided paired t-test detects a true ``difference`` with ``power`` at SD ``sd``
    (``None``: no difference, or more than ``most``)."""
    from statsmodels.stats.power import TTestPower

    if difference == 0 or not sd > 0:
        return None
    size, solver = abs(difference) / sd, TTestPower()

    def enough(n: int) -> bool:  # statsmodels' noncentral t gives NaN far past 80 % (thousands of pairs): enough
        found = solver.power(effect_size=size, nobs=n, alpha=alpha, alternative="two-sided")
        return bool(math.isnan(found) or found >= power)

    root = float(solver.solve_power(effect_size=size, alpha=alpha, power=power, alternative="two-sided"))
    if not math.isfinite(root) or root > most:
        return None
    found = max(2, math.ceil(root))
    while found > 2 and enough(found - 1):  # the solver's root, rounded up, checked on both sides
        found -= 1
    while not enough(found):
        found += 1
    return found if found <= most else None


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (statsmodels) of ``p_values``; NaN stays NaN (no test) and counts as none."""
    from statsmodels.stats.multitest import multipletests

    tested = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    adjusted = [math.nan] * len(p_values)
    if tested:
        found = multipletests([p_values[i] for i in tested], alpha=ALPHA, method="holm")[1]
        for i, p in zip(tested, found):
            adjusted[i] = float(p)
    return adjusted


def across_tasks(ours: list, theirs: list) -> float:
    """The mean over tasks (each weighs alike) of :func:`effect`, per task (``ours[k]``, ``theirs[k]`` paired)."""
    effects = [effect(o, t) for o, t in zip(ours, theirs)]
    return float(np.mean(effects)) if effects and not any(math.isnan(e) for e in effects) else math.nan


def across_tasks_interval(ours: list, theirs: list, resamples: int = RESAMPLES,
                          seed: int = SEED) -> tuple[float, float] | None:
    """The stratified percentile bootstrap interval of :func:`across_tasks`: each task's pairs resampled on their own
    (a resample whose pooled SD is 0 is left out); ``None`` below two pairs in a task."""
    rng = np.random.default_rng(seed)
    total = np.zeros(resamples)
    for o, t in zip(ours, theirs):
        o, t = np.asarray(o, float), np.asarray(t, float)
        if o.size < 2:
            return None
        picks = rng.integers(0, o.size, size=(resamples, o.size))
        a, b = o[picks], t[picks]
        sd = np.sqrt((np.var(a, axis=1, ddof=1) + np.var(b, axis=1, ddof=1)) / 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            total += np.where(sd > 0, (a - b).mean(axis=1) / sd, np.nan)
    draws = total / len(ours)
    tail = (1 - LEVEL) / 2
    return float(np.nanquantile(draws, tail)), float(np.nanquantile(draws, 1 - tail))
