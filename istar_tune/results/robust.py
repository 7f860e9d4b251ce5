"""The paired statistics of a seeds stage beside the paper's (``table --kind seeds --stats robust|all``): every method
against Base, paired by seed (the runs of one seed share the head's initialisation, the dropout masks and the data
order, so their difference removes what the seed adds to both).

The primary comparison is the one whose coverage is right at the few seeds a stage has: the mean paired difference
with its Student t-interval, the two-sided paired t-test (Holm-adjusted over the model's tasks and methods: the ``†``
of ``--stats robust|all``) and the exact Wilcoxon signed-rank test, and the effect in units of the pooled seed SD.
Resampling intervals (a bootstrap of the mean difference, of P(X > Y), the stratified one over tasks) are printed
only at pair counts where their coverage, measured by ``benchmarks/bench_coverage.py``
(:mod:`~istar_tune.results.coverage`), is within 2 points of nominal; elsewhere the note says what they would cover.
:func:`power_table` says what the seeds used can detect.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from istar_tune.methods import BASELINE, label
from istar_tune.metrics import score
from istar_tune.results import coverage, paired, resampling
from istar_tune.results.groups import axes, candidates, percent
from istar_tune.results.seeds import refuse_studies
from istar_tune.tracking.runs import TrialRun, run_task

ACROSS_TASKS = "mean over tasks"
NOT_SHOWN = "—"
ROBUST_COLUMNS = ["model", "method", "task", "n", "difference", "ci_low", "ci_high", "p_t", "p_holm", "p_wilcoxon",
                  "effect_sd", "bootstrap", "p_improvement", "p_interval", "note"]
ROBUST_CAPTION = (
    "Against Base, paired by seed (the same seed's runs of a model and task; a run without its partner is left out), "
    "in percent points: `difference` the mean paired difference with its 95 % Student t-interval (`ci_low`, "
    "`ci_high`); `p_t` the two-sided paired t-test, `p_holm` it Holm-adjusted over the model's tasks and methods (the "
    "† of this table's seeds cells), `p_wilcoxon` the exact two-sided Wilcoxon signed-rank test (its smallest p is "
    "2/2ⁿ: 0.0625 at 5 pairs); `effect_sd` the difference in units of the pooled seed SD of the two methods; "
    "`bootstrap` (percentile, of the mean difference) and `p_interval` (of `p_improvement`, P(X > Y): the chance a "
    "run of the method beats a run of Base, ties half) only where their coverage measured by simulation "
    "(benchmarks/bench_coverage.py: normal and heavy-tailed differences) is within 2 points of 95 %, enumerated "
    "exactly up to 7 values a side; `note` says what an interval not shown would cover and what more seeds would "
    f"show. `{ACROSS_TASKS}`: the mean over the model's tasks, each weighing alike, of each task's difference in "
    "units of its pooled seed SD (`effect_sd`), with a stratified bootstrap interval where its coverage holds.")
POWER_CAPTION = (
    "What the seeds can show, per model and task: `pairs` the seed pairs each method shares with Base, `sd` the SD of "
    "the paired differences (pooled over the methods), `detectable` the smallest true difference a two-sided paired "
    "t-test at 0.05 detects with 80 % power from these pairs, and the pairs 0.5 and 1 point would need.")


def paired_scores(method_runs: list[TrialRun], base_runs: list[TrialRun], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The method's and Base's scores in percent, seed by seed, over the seeds both ran."""
    def by_seed(runs: list[TrialRun]) -> dict:
        return {r.config.get("seed"): percent(run_task(r), score(r.metrics, metric)) for r in runs
                if score(r.metrics, metric) is not None}

    ours, theirs = by_seed(method_runs), by_seed(base_runs)
    seeds = sorted(set(ours) & set(theirs), key=str)
    return np.array([ours[s] for s in seeds], dtype=float), np.array([theirs[s] for s in seeds], dtype=float)


def comparisons(runs: list[TrialRun], models=None, tasks=None, methods=None) -> dict[tuple, tuple]:
    """(model, task, method) → (ours, Base's) paired scores in percent, every method but Base that has partners."""
    models, tasks, methods = axes(runs, models, tasks, methods)
    groups = candidates(runs)
    refuse_studies(groups)  # a pair is one configuration's two seeds, never two values of a varied hyperparameter
    found = {}
    for model in models:
        for method in (m for m in methods if m != BASELINE):
            for task in tasks:
                ours, theirs = groups.get((model, task, method), []), groups.get((model, task, BASELINE), [])
                if ours and theirs:
                    found[(model, task, method)] = paired_scores(ours, theirs, run_task(ours[0]).metric)
    return found


def holm_by_model(found: dict[tuple, tuple]) -> dict[tuple, float]:
    """Each comparison's paired t p, Holm-adjusted over its model's tasks and methods."""
    adjusted = {}
    for model in dict.fromkeys(key[0] for key in found):
        keys = [key for key in found if key[0] == model]
        raw = [paired.paired_t(found[k][0] - found[k][1]).p for k in keys]
        adjusted.update(zip(keys, paired.holm(raw)))
    return adjusted


def significant(found: dict[tuple, tuple]) -> dict[tuple, str]:
    """(model, task, method) → ``†`` (above Base) or ``‡`` (below) where the Holm-adjusted paired t p < 0.05."""
    marks = {}
    for key, p in holm_by_model(found).items():
        difference = float(np.mean(found[key][0] - found[key][1]))
        if p < paired.ALPHA and difference != 0:
            marks[key] = "†" if difference > 0 else "‡"
    return marks


def robust_table(runs: list[TrialRun], models=None, tasks=None, methods=None,
                 found: dict[tuple, tuple] | None = None) -> pd.DataFrame:
    """Every method but Base against Base, per model and task, and over the model's tasks (:data:`ROBUST_CAPTION`);
    ``found``: :func:`comparisons` of these runs, where the caller has them."""
    found = comparisons(runs, models, tasks, methods) if found is None else found
    adjusted = holm_by_model(found)
    rows = []
    for model, method in dict.fromkeys((key[0], key[2]) for key in found):
        keys = [key for key in found if key[0] == model and key[2] == method]
        rows += [_row(key, *found[key], adjusted[key]) for key in keys]
        if len(keys) > 1:
            rows.append(_across(model, method, [found[key] for key in keys]))
    table = pd.DataFrame(rows, columns=ROBUST_COLUMNS)
    table.attrs["caption"] = ROBUST_CAPTION
    return table


def _rounded(value: float, digits: int = 2) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), digits)


def _interval(bounds: tuple[float, float], digits: int = 2) -> str:
    return f"[{bounds[0]:.{digits}f}, {bounds[1]:.{digits}f}]"


def _row(key: tuple, ours: np.ndarray, theirs: np.ndarray, p_holm: float) -> dict:
    model, task, method = key
    differences, n = ours - theirs, int(ours.size)
    t = paired.paired_t(differences) if n else None
    notes, shown = [], {"bootstrap": NOT_SHOWN, "p_interval": NOT_SHOWN}
    if n >= 2 and coverage.holds("mean", n):
        shown["bootstrap"] = _interval(tuple(float(v[0]) for v in resampling.mean_interval(differences[None])))
    elif n >= 2:
        notes.append(coverage.why_not("mean", n))
    if n >= 2 and coverage.holds("improvement", n):
        bounds = resampling.improvement_interval(ours[None], theirs[None])
        shown["p_interval"] = _interval((float(bounds[0][0]), float(bounds[1][0])), 3)
    elif n >= 2:
        notes.append(coverage.why_not("improvement", n))
    notes += _what_more_would_show(differences, t)
    return {"model": model, "method": label(method), "task": task, "n": n,
            "difference": _rounded(t.mean) if t else None, "ci_low": _rounded(t.low) if t else None,
            "ci_high": _rounded(t.high) if t else None, "p_t": _rounded(t.p, 3) if t else None,
            "p_holm": _rounded(p_holm, 3), "p_wilcoxon": _rounded(paired.wilcoxon_p(differences), 4) if n else None,
            "effect_sd": _rounded(paired.effect(ours, theirs)), **shown,
            "p_improvement": _rounded(float(resampling.improvement(ours[None], theirs[None])[0]), 3) if n else None,
            "note": "; ".join(notes)}


def _what_more_would_show(differences: np.ndarray, t) -> list[str]:
    n = differences.size
    if n < 2:
        return [f"{n} pair{'s' if n != 1 else ''}: no interval or test"]
    notes = []
    if n <= 5:
        notes.append(f"the signed-rank test's smallest p at {n} pairs is {paired.smallest_wilcoxon_p(n):.4g}")
    if t.low <= 0 <= t.high:
        needed = paired.pairs_needed(t.mean, float(np.std(differences, ddof=1)))
        notes.append("the t-interval includes 0" + (
            f"; about {needed} pairs would detect {abs(t.mean):.2f} points with 80 % power at this spread"
            if needed else ""))
    return notes


def _across(model: str, method: str, pairs: list[tuple]) -> dict:
    ours, theirs = [o for o, _ in pairs], [t for _, t in pairs]
    fewest = min(o.size for o in ours)
    bounds, note = None, ""
    if fewest >= 2 and coverage.holds("across_tasks", fewest):
        bounds = paired.across_tasks_interval(ours, theirs)
    elif fewest >= 2:
        note = coverage.why_not("across_tasks", fewest).replace("pairs", "pairs in a task", 1)
    return {"model": model, "method": label(method), "task": ACROSS_TASKS, "n": len(pairs),
            "difference": None, "ci_low": None, "ci_high": None, "p_t": None, "p_holm": None, "p_wilcoxon": None,
            "effect_sd": _rounded(paired.across_tasks(ours, theirs)),
            "bootstrap": _interval(bounds) if bounds else NOT_SHOWN, "p_improvement": None, "p_interval": NOT_SHOWN,
            "note": (f"{len(pairs)} tasks, each in units of its pooled seed SD; " + note).rstrip("; ")}


def power_table(runs: list[TrialRun], models=None, tasks=None, methods=None,
                found: dict[tuple, tuple] | None = None) -> pd.DataFrame:
    """Per model and task, what the seeds used can detect (:data:`POWER_CAPTION`); ``found`` as for
    :func:`robust_table`."""
    found = comparisons(runs, models, tasks, methods) if found is None else found
    rows = []
    for model, task in dict.fromkeys((key[0], key[1]) for key in found):
        differences = [found[k][0] - found[k][1] for k in found if k[:2] == (model, task)]
        differences = [d for d in differences if d.size >= 2]
        if not differences:
            continue
        pairs = min(d.size for d in differences)
        sd = math.sqrt(float(np.mean([np.var(d, ddof=1) for d in differences])))
        rows.append({"model": model, "task": task, "pairs": pairs, "sd": _rounded(sd),
                     "detectable": _rounded(paired.detectable(pairs, sd)),
                     "pairs_for_0.5": paired.pairs_needed(0.5, sd), "pairs_for_1": paired.pairs_needed(1.0, sd)})
    table = pd.DataFrame(rows, columns=["model", "task", "pairs", "sd", "detectable", "pairs_for_0.5", "pairs_for_1"])
    table.attrs["caption"] = POWER_CAPTION
    return table
