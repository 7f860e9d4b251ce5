"""Robust statistics of a seeds stage beside the paper's (``table --kind seeds --stats robust|all``): every method
against Base, paired by seed (the runs of one seed share the head's initialisation, the dropout masks and the data
order, so their difference removes what the seed adds to both): the mean paired difference with a bootstrap interval
(BCa where n allows, else percentile; the method stated), the probability of improvement P(X > Y) with its interval,
the interquartile mean of the paired differences over the tasks with a stratified bootstrap interval (Agarwal et al.,
"Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021), and a note where the interval cannot exclude zero:
about how many seeds would, at the spread observed. scipy computes; every draw is seeded, so a table prints the same
numbers each time.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from istar_tune.methods import BASELINE, label
from istar_tune.metrics import score
from istar_tune.results.groups import axes, candidates, percent
from istar_tune.results.seeds import refuse_studies, seed_scores
from istar_tune.tracking.runs import TrialRun, run_task

CONFIDENCE = 0.95
RESAMPLES = 9999
"""Bootstrap resamples of each interval."""
BCA_FROM = 5
"""The fewest pairs a BCa interval is computed from (its acceleration is a jackknife over the pairs); fewer: the
percentile interval."""
SEED = 0
"""Every bootstrap's generator: the same table every time."""
ACROSS_TASKS = "IQM over tasks"
ROBUST_CAPTION = (f"Against Base, paired by seed (the same seed's runs of a model and task; a run without its partner "
                  f"is left out), in percent points: `difference` the mean paired difference with a "
                  f"{100 * CONFIDENCE:g} % bootstrap interval ({RESAMPLES:,} resamples; BCa from {BCA_FROM} pairs, "
                  "else percentile: `interval` names it); `p_improvement` P(X > Y), the chance a run of the method "
                  "beats a run of Base (ties count half), with a percentile bootstrap interval; `IQM over tasks` the "
                  "interquartile mean of the paired differences pooled over the model's tasks, its interval a "
                  "stratified bootstrap (seeds resampled within each task; Agarwal et al., 2021); `note`: an interval "
                  "that includes 0, and about how many seeds would exclude it at the spread observed (Student's t).")


def paired_differences(method_runs: list[TrialRun], base_runs: list[TrialRun], metric: str) -> np.ndarray:
    """The method's score less Base's, seed by seed, in percent (seeds both ran)."""
    def by_seed(runs: list[TrialRun]) -> dict:
        return {r.config.get("seed"): percent(run_task(r), score(r.metrics, metric)) for r in runs
                if score(r.metrics, metric) is not None}

    ours, theirs = by_seed(method_runs), by_seed(base_runs)
    return np.array([ours[s] - theirs[s] for s in sorted(set(ours) & set(theirs), key=str)], dtype=float)


def mean_interval(differences: np.ndarray) -> tuple[float, float, str] | None:
    """The bootstrap interval of the mean of ``differences`` and its method (BCa, else percentile)."""
    from scipy import stats

    if differences.size < 2:
        return None
    if np.all(differences == differences[0]):
        return float(differences[0]), float(differences[0]), "none (every pair differs alike)"
    for method in (("BCa", "percentile") if differences.size >= BCA_FROM else ("percentile",)):
        found = stats.bootstrap((differences,), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                                method=method, rng=np.random.default_rng(SEED)).confidence_interval
        if np.isfinite(found.low) and np.isfinite(found.high):
            return float(found.low), float(found.high), f"{method} bootstrap"
    return None


def probability_of_improvement(ours: np.ndarray, theirs: np.ndarray) -> float:
    """P(X > Y) + ½ P(X = Y) over every pair of a run of ours and one of theirs (the Mann-Whitney U over n·m)."""
    greater = (ours[:, None] > theirs[None, :]).sum()
    ties = (ours[:, None] == theirs[None, :]).sum()
    return float((greater + 0.5 * ties) / (ours.size * theirs.size))


def improvement_interval(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float] | None:
    """The percentile bootstrap interval of :func:`probability_of_improvement` (each side resampled on its own)."""
    from scipy import stats

    if ours.size < 2 or theirs.size < 2:
        return None
    found = stats.bootstrap((ours, theirs), lambda x, y, axis=-1: _vectorised_improvement(x, y, axis),
                            confidence_level=CONFIDENCE, n_resamples=RESAMPLES, method="percentile",
                            rng=np.random.default_rng(SEED), vectorized=True).confidence_interval
    return float(found.low), float(found.high)


def _vectorised_improvement(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    greater = (x[..., :, None] > y[..., None, :]).sum(axis=(-1, -2))
    ties = (x[..., :, None] == y[..., None, :]).sum(axis=(-1, -2))
    return (greater + 0.5 * ties) / (x.shape[-1] * y.shape[-1])


def interquartile_mean(values: np.ndarray) -> float:
    """The mean of the middle half (25 % trimmed from each end, scipy's ``trim_mean``)."""
    from scipy import stats

    return float(stats.trim_mean(values, 0.25))


def stratified_interval(by_task: list[np.ndarray], resamples: int = RESAMPLES) -> tuple[float, float] | None:
    """The percentile interval of the IQM of the pooled values when each task's values are resampled on their own."""
    if sum(v.size for v in by_task) < 2:
        return None
    rng = np.random.default_rng(SEED)
    draws = [np.concatenate([v[rng.integers(0, v.size, v.size)] for v in by_task]) for _ in range(resamples)]
    estimates = np.array([interquartile_mean(d) for d in draws])
    tail = (1 - CONFIDENCE) / 2
    return float(np.quantile(estimates, tail)), float(np.quantile(estimates, 1 - tail))


def seeds_to_exclude_zero(differences: np.ndarray, most: int = 1000) -> int | None:
    """The fewest pairs whose Student's t interval of the mean would exclude 0 at the observed mean and spread
    (``None`` when no difference is observed, or more than ``most`` would be needed)."""
    from scipy import stats

    mean, sd = float(np.mean(differences)), float(np.std(differences, ddof=1))
    if mean == 0 or differences.size < 2:
        return None
    if sd == 0:
        return 2
    for n in range(2, most + 1):
        if stats.t.ppf(1 - (1 - CONFIDENCE) / 2, n - 1) * sd / math.sqrt(n) < abs(mean):
            return n
    return None


def robust_table(runs: list[TrialRun], models=None, tasks=None, methods=None) -> pd.DataFrame:
    """Every method but Base against Base, per model and task, and over the model's tasks (:data:`ROBUST_CAPTION`)."""
    models, tasks, methods = axes(runs, models, tasks, methods)
    groups = candidates(runs)
    refuse_studies(groups)  # a pair is one configuration's two seeds, never two values of a varied hyperparameter
    rows = []
    for model in models:
        for method in (m for m in methods if m != BASELINE):
            pooled = []
            for task in tasks:
                ours, theirs = groups.get((model, task, method), []), groups.get((model, task, BASELINE), [])
                if not ours or not theirs:
                    continue
                metric = run_task(ours[0]).metric
                differences = paired_differences(ours, theirs, metric)
                pooled.append(differences)
                rows.append(_row(model, method, task, differences,
                                 np.array(seed_scores(groups, model, task, method, metric)),
                                 np.array(seed_scores(groups, model, task, BASELINE, metric))))
            if len(pooled) > 1:
                rows.append(_across(model, method, pooled))
    table = pd.DataFrame(rows, columns=["model", "method", "task", "n", "difference", "ci_low", "ci_high", "interval",
                                        "p_improvement", "p_low", "p_high", "note"])
    table.attrs["caption"] = ROBUST_CAPTION
    return table


def _row(model: str, method: str, task: str, differences: np.ndarray, ours: np.ndarray, theirs: np.ndarray) -> dict:
    bounds = mean_interval(differences)
    improvement = improvement_interval(ours, theirs)
    row = {"model": model, "method": label(method), "task": task, "n": int(differences.size),
           "difference": round(float(np.mean(differences)), 2) if differences.size else None,
           "ci_low": round(bounds[0], 2) if bounds else None, "ci_high": round(bounds[1], 2) if bounds else None,
           "interval": bounds[2] if bounds else "none (fewer than 2 pairs)",
           "p_improvement": round(probability_of_improvement(ours, theirs), 3) if ours.size and theirs.size else None,
           "p_low": round(improvement[0], 3) if improvement else None,
           "p_high": round(improvement[1], 3) if improvement else None}
    row["note"] = _note(differences, bounds)
    return row


def _note(differences: np.ndarray, bounds) -> str:
    if bounds is None or not bounds[0] <= 0 <= bounds[1]:
        return ""
    needed = seeds_to_exclude_zero(differences)
    if needed is None:
        return "the interval includes 0; no seed count would exclude it at this spread and mean"
    return f"the interval includes 0; about {needed} seeds would exclude it at this spread (t-interval)"


def _across(model: str, method: str, pooled: list[np.ndarray]) -> dict:
    kept = [d for d in pooled if d.size]
    values = np.concatenate(kept) if kept else np.array([])
    bounds = stratified_interval(kept) if kept else None
    return {"model": model, "method": label(method), "task": ACROSS_TASKS, "n": int(values.size),
            "difference": round(interquartile_mean(values), 2) if values.size else None,
            "ci_low": round(bounds[0], 2) if bounds else None, "ci_high": round(bounds[1], 2) if bounds else None,
            "interval": "stratified percentile bootstrap" if bounds else "none", "p_improvement": None,
            "p_low": None, "p_high": None, "note": "" if bounds is None or not bounds[0] <= 0 <= bounds[1] else
            "the interval includes 0"}
