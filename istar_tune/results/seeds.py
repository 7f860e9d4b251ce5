"""The paper's Table 1 (``table --kind seeds``): model × method rows, task columns, mean ± std [95 % t-interval] over
the seed runs (SQuAD as F1 / EM; a cell of one run shows no SD), ``*`` on the best row per model and task among
those of two seeds or more, ``†`` where I-STAR beats Base significantly by the paper's test (one-sided Welch's
t-tests, Holm-corrected over the model's tasks, p < 0.05) or, given the paired marks of
:mod:`~istar_tune.results.robust` (``--stats all``), ``†``/``‡`` where any method is above/below Base by the paired
t-test; the caption says which, how the configurations were chosen (dev set or held-out training data) and what
``†`` does not correct for. A method whose paper reports the
median (IsoLayer) shows median ± std and the explained variance EV_1/EV_2/EV_3 of its sentence space in the run with
the median EV_1, after a "Finetuned LM" row of its first stage's model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from istar_tune.errors import ConfigError
from istar_tune.markdown import MISSING
from istar_tune.methods import BASELINE, METHODS, PAPER_METHOD, has_second_stage, label
from istar_tune.metrics import FINETUNED_PREFIX, score
from istar_tune.results.groups import axes, candidates, paper_results, percent, varied
from istar_tune.tasks import Task, get_task
from istar_tune.tracking.runs import TrialRun, run_task, run_tasks

SIGNIFICANCE = 0.05
SEEDS_CAPTION = ("Mean ± SD (the sample standard deviation over the seeds, not the standard error) [95 % Student's "
                 "t-interval of the mean] over a cell's n seed runs (percent; SQuAD F1 / EM; a median where the "
                 "method's paper reports one; n per cell in the csv). A seed changes the new head's initialisation, "
                 "the dropout masks, each epoch's data order and the order Σ_S reads the data in (and, with held-out "
                 "data and no holdout_seed, which examples are held out); the pretrained weights, the data and the "
                 "configuration are fixed; a cell of one run shows no SD (— and n = 1). * best row per model and task "
                 "among those of two seeds or more; ")
WELCH_MARK = ("† I-STAR > Base, one-sided Welch's t-test, Holm-adjusted p < 0.05 over the tasks of the model (the "
              "paper's test; --stats robust pairs by seed).")
PAIRED_MARK = ("† above Base, ‡ below Base: the two-sided paired t-test by seed, Holm-adjusted p < 0.05 over the "
               "tasks and methods of the model (the robust table's p_holm).")


def _reports_median(method: str) -> bool:
    """Whether the method's paper summarises seed runs by their median (and the EV of the median-EV_1 run)."""
    return method in METHODS and METHODS[method].seeds_summary == "median"


CONFIDENCE = 0.95
"""The level of each seeds cell's interval (Student's t over the seeds)."""
FINETUNED_LABEL = "Finetuned LM"
"""The row of a two-stage method's first-stage model (IsoLayer's paper: the fine-tuned LM without the layer)."""


def seed_rows(methods: list[str]) -> list[tuple[str, str, str]]:
    """(row label, method, metric prefix) per row: a two-stage method's first stage ("Finetuned LM", from its
    ``finetuned_*`` measures) right before it ("+IsoLayer")."""
    rows = []
    for method in methods:
        median = " (median)" if _reports_median(method) else ""
        if has_second_stage(method):
            rows.append((FINETUNED_LABEL + median, method, FINETUNED_PREFIX))
            rows.append((f"+{label(method)}{median}", method, ""))
        else:
            rows.append((label(method) + median, method, ""))
    return rows


def agree(values) -> bool:
    """Whether two or more values are one value up to float rounding (a spread under 1e-9 of their size): seeds that
    agree have a zero-width interval, and no t statistic is computed of them (scipy's moments of nearly equal values
    lose their precision and warn)."""
    values = np.asarray(values, dtype=float)
    return values.size > 1 and float(np.ptp(values)) <= 1e-9 * max(1.0, float(np.max(np.abs(values))))


def interval(values: list[float]) -> tuple[float, float] | None:
    """The 95 % Student's t interval of the mean of ``values`` (``None`` for fewer than two; zero-width where they
    agree)."""
    from scipy import stats

    if len(values) < 2:
        return None
    if agree(values):
        return float(np.mean(values)), float(np.mean(values))
    sem = stats.sem(values)
    low, high = stats.t.interval(CONFIDENCE, len(values) - 1, loc=np.mean(values), scale=sem)
    return float(low), float(high)


def significant_tasks(istar: dict[str, list[float]], base: dict[str, list[float]]) -> set[str]:
    """The tasks where I-STAR's seeds beat Base's: one-sided Welch's t-tests (scipy), one per task both have two or
    more seeds of, their p-values Holm-corrected over those tasks (statsmodels) at :data:`SIGNIFICANCE`."""
    from scipy.stats import ttest_ind
    from statsmodels.stats.multitest import multipletests

    tasks = [t for t in istar if len(istar[t]) > 1 and len(base.get(t, [])) > 1]
    if not tasks:
        return set()
    p_values = [_welch_greater(istar[t], base[t], ttest_ind) for t in tasks]
    reject = multipletests(p_values, alpha=SIGNIFICANCE, method="holm")[0]
    return {t for t, r in zip(tasks, reject) if r}


def _welch_greater(ours: list[float], theirs: list[float], ttest_ind) -> float:
    """The one-sided Welch p that ``ours`` is greater; a side whose seeds agree has no variance, so the test is the
    other side's one-sample t against that value (Welch's statistic and degrees of freedom then); both agreeing: 1
    (no evidence, whatever the means)."""
    from scipy.stats import ttest_1samp

    if agree(ours) and agree(theirs):
        return 1.0
    if agree(ours):
        return float(ttest_1samp(theirs, float(np.mean(ours)), alternative="less").pvalue)
    if agree(theirs):
        return float(ttest_1samp(ours, float(np.mean(theirs)), alternative="greater").pvalue)
    return float(ttest_ind(ours, theirs, equal_var=False, alternative="greater").pvalue)


def seeds_table(runs: list[TrialRun], models=None, tasks=None, methods=None,
                against_paper: bool = False, paired_marks: dict[tuple, str] | None = None) -> pd.DataFrame:
    """Mean (or the method's paper's median) ± std [95 % interval] over each group's runs (the seed runs of the
    paper's second stage), in percent; ``attrs["caption"]`` says how their configurations were chosen. ``†`` is the
    paper's one-sided Welch test of I-STAR against Base, or with ``paired_marks`` ((model, task, method) → ``†`` or
    ``‡``, :func:`istar_tune.results.robust.significant`) the paired t-test's marks for every method."""
    paper = paper_results()["seeds"] if against_paper else {}
    iso_paper = paper_results()["isolayer_table3"] if against_paper else {}
    if against_paper:  # every cell of the paper's Table 1, ours marked missing where no run exists
        methods = methods or [m for m in METHODS if any(m in by_method for by_method in paper.values())
                              or any(r.method == m for r in runs)]
        shown = [*paper, *(iso_paper if any(has_second_stage(m) for m in methods) else [])]
        models = models or list(dict.fromkeys([*(r.model for r in runs), *shown]))
    models, tasks, methods = axes(runs, models, tasks, methods, against_paper)
    groups, rows = candidates(runs), seed_rows(methods)
    refuse_studies(groups)
    cells: dict[tuple, str] = {}
    typed: list[dict] = []
    known = run_tasks(runs)
    of = {task: get_task(task, known) for task in tasks}
    for model in models:
        primary_of = {task: of[task].metric for task in tasks}
        marked = significant_tasks({t: seed_scores(groups, model, t, PAPER_METHOD, m) for t, m in primary_of.items()},
                                   {t: seed_scores(groups, model, t, BASELINE, m) for t, m in primary_of.items()})
        for task in tasks:
            means = {row: float(_center(method)(v)) for row, method, prefix in rows
                     if len(v := seed_scores(groups, model, task, method, prefix + primary_of[task])) > 1}
            winner = max(means, key=means.get) if means else None  # a best needs two seeds or more
            for row, method, prefix in rows:
                mark = (paired_marks.get((model, task, method), "") if paired_marks is not None and not prefix
                        else "†" if paired_marks is None and method == PAPER_METHOD and task in marked else "")
                marks = {"best": row == winner, "significant": mark}
                cell, cell_typed = _seed_cell(groups, model, of[task], row, method, prefix, marks, (paper, iso_paper))
                if against_paper:
                    cell += _paper_cell(paper, iso_paper, model, task, method, prefix, means.get(row))
                cells[(model, row, task)] = cell
                typed += cell_typed
    table = pd.DataFrame([{"model": model, "method": row,
                           **{of[task].display_name: cells[(model, row, task)] for task in tasks}}
                          for model in models for row, _, _ in rows])
    table.attrs["caption"] = seeds_caption(runs, paired=paired_marks is not None)
    table.attrs["typed"] = pd.DataFrame(typed, columns=TYPED_SEEDS).astype(
        {"value": "Float64", "std": "Float64", "ci_low": "Float64", "ci_high": "Float64", "n": "Int64",
         "best": "boolean", "significant": "boolean", "paper_value": "Float64", "paper_std": "Float64",
         "training_share": "Float64"})
    return table


def refuse_studies(groups: dict[tuple, list[TrialRun]]) -> None:
    """A cell is one configuration's seeds: a seeds stage whose runs differ in a hyperparameter (a study, ``vary``)
    is refused rather than pooled."""
    for (model, task, method), runs in groups.items():
        differ = varied([r for r in runs if r.stage == "seeds"])
        if differ:
            what = "; ".join(f"{k} ({', '.join(v)})" for k, v in differ.items())
            raise ConfigError(f"the seed runs of {model} × {task} × {method} differ in {what}: a cell of --kind seeds "
                              "is one configuration's seeds, and this experiment is a study (vary); draw it with "
                              "istar-tune plots (a point per value, error bars over seeds), or tabulate a seeds stage "
                              "without vary")


def seed_scores(groups: dict, model: str, task: str, method: str, metric: str) -> list[float]:
    """A group's seed scores on ``metric``, in percent."""
    return [percent(run_task(r), score(r.metrics, metric)) for r in groups.get((model, task, method), [])
            if score(r.metrics, metric) is not None]


def _center(method: str):
    return np.median if _reports_median(method) else np.mean


def _median_ev(groups: dict, model: str, task: str, method: str, prefix: str) -> str:
    """EV_1/EV_2/EV_3 of the run with the median EV_1 (the lower middle one of an even count)."""
    ev1 = f"{prefix}sentence_ev1"
    measured = [r for r in groups.get((model, task, method), []) if score(r.metrics, ev1) is not None]
    ordered = sorted(measured, key=lambda r: (score(r.metrics, ev1), r.trial_id))
    if not ordered:
        return ""
    chosen = ordered[(len(ordered) - 1) // 2].metrics
    return "; EV " + "/".join(f"{score(chosen, f'{prefix}sentence_ev{k}'):.2f}" for k in (1, 2, 3)
                              if score(chosen, f"{prefix}sentence_ev{k}") is not None)


def _seed_cell(groups: dict, model: str, the_task: Task, row: str, method: str, prefix: str, marks: dict[str, bool],
               papers: tuple[dict, dict]) -> tuple[str, list[dict]]:
    """One cell of the table (every metric of the task, its marks) and its typed rows, one per metric."""
    parts, typed, task = [], [], the_task.name
    for index, metric in enumerate(the_task.metrics):
        observed = seed_scores(groups, model, task, method, prefix + metric)
        std = float(np.std(observed, ddof=1)) if len(observed) > 1 else None
        bounds = interval(observed)
        if len(observed) > 1:
            same = f" (all {len(observed)} seeds agree)" if agree(observed) else ""
            parts.append(f"{_center(method)(observed):.2f} ± {std:.2f} [{bounds[0]:.2f}, {bounds[1]:.2f}]{same}")
        elif observed:  # one run: no spread to show
            parts.append(f"{observed[0]:.2f} ± {MISSING} (n = 1)")
        published = _published(*papers, model, task, method, prefix, index)
        typed.append({"model": model, "method": row, "task": task,
                      "metric": the_task.metric_text if metric == the_task.metric else metric,
                      "summary": "median" if _reports_median(method) else "mean",
                      "value": float(_center(method)(observed)) if observed else None,
                      "std": std, "ci_low": bounds[0] if bounds else None,
                      "ci_high": bounds[1] if bounds else None, "n": len(observed),
                      "best": bool(observed) and marks["best"],
                      "significant": bool(observed) and bool(marks["significant"]),
                      "paper_value": published[0], "paper_std": published[1],
                      **_protocol(groups.get((model, task, method), []))})
    if not parts:
        return MISSING, typed
    cell = " / ".join(parts) + (" *" if marks["best"] else "") + (f" {marks['significant']}"
                                                                  if marks["significant"] else "")
    if _reports_median(method):
        cell += _median_ev(groups, model, task, method, prefix)
    return cell, typed


TYPED_SEEDS = ["model", "method", "task", "metric", "summary", "value", "std", "ci_low", "ci_high", "n", "best",
               "significant", "paper_value", "paper_std", "chosen_by", "training_share"]
"""The seeds table as csv and parquet write it: a row per cell and metric, numbers in typed columns (percent); how
its seed runs were chosen (``dev`` or ``holdout``) and the share of the training data they trained on."""


def _protocol(runs: list[TrialRun]) -> dict:
    """How a cell's seed runs were chosen and the share of the training data they trained on (1.0: all of it)."""
    chosen = sorted({r.chosen_by for r in runs if r.chosen_by})
    held = sorted({_holdout(r) for r in runs})
    return {"chosen_by": chosen[0] if len(chosen) == 1 else (", ".join(chosen) or None),
            "training_share": 1.0 - held[0] if len(held) == 1 else None}


def _holdout(run: TrialRun) -> float:
    """The share of the training data a run held out (its ``setting.holdout`` param; 0 when not set)."""
    value = run.settings.get("holdout")
    return 0.0 if value in (None, "", "None") else float(value)


def _published(paper: dict, iso_paper: dict, model: str, task: str, method: str, prefix: str,
               index: int) -> tuple[float | None, float | None]:
    """(value, std) the papers publish for a seeds cell's ``index``-th metric, or (None, None)."""
    if has_second_stage(method):
        cell = iso_paper.get(model, {}).get(task, {}).get("finetuned" if prefix else "isolayer")
        return (cell["median"], cell["std"]) if cell and index == 0 else (None, None)
    cell = paper.get(model, {}).get(method, {}).get(task)
    return tuple(cell[index]) if cell and index < len(cell) else (None, None)


def _paper_cell(paper: dict, iso_paper: dict, model: str, task: str, method: str, prefix: str,
                ours: float | None) -> str:
    """`` (paper …)``: the I-STAR paper's Table 1 cell, or the IsoLayer paper's Table 3 (median ± std; EV) one."""
    if has_second_stage(method):
        published = iso_paper.get(model, {}).get(task, {}).get("finetuned" if prefix else "isolayer")
        if published is None:
            return f" (paper {MISSING})"
        delta = f", Δ {ours - published['median']:+.2f}" if ours is not None else ""
        ev = "/".join(f"{v:.2f}" for v in published["ev"])
        return f" (paper {published['median']:.2f} ± {published['std']:.2f}; EV {ev}{delta})"
    published = paper.get(model, {}).get(method, {}).get(task)  # [[mean, std] per metric]
    if published is None:
        return f" (paper {MISSING})"
    shown = " / ".join(f"{mean:.2f} ± {std:.2f}" for mean, std in published)
    delta = f", Δ {ours - published[0][0]:+.2f}" if ours is not None else ""
    return f" (paper {shown}{delta})"


CHOICES = {
    "dev": "Configurations: each group's best on the dev set these scores come from (the paper's protocol). † "
           "corrects for seed noise and for the number of tasks compared per model (Holm), not for that choice: "
           "I-STAR's configuration is the best of more candidates on the same dev set than Base's.",
    "auto": "Configurations: each group's best by its search's objective: on held-out training examples where the "
            "search held data out (the dev set reported here then chose nothing), else on the dev set. † corrects "
            "for seed noise and for the number of tasks compared per model (Holm).",
    "holdout": "Configurations: each group's best on held-out training examples; the dev set "
               "reported here chose nothing, so every method had the same chance. † corrects for seed noise and for "
               "the number of comparisons per model (Holm).",
}


def seeds_caption(runs: list[TrialRun], paired: bool = False) -> str:
    """The seeds table's caption: what the cells are, which test marks † (``paired``: the paired t-test, else the
    paper's Welch test), and how the configurations behind them were chosen."""
    chosen = sorted({r.chosen_by or "unknown" for r in runs if r.stage == "seeds"})
    if len(chosen) == 1 and chosen[0] in CHOICES:
        how = CHOICES[chosen[0]]
    elif chosen:
        how = (f"Configurations chosen by: {', '.join(chosen)} (runs without the tag were written before istar-tune "
               "recorded it). † corrects for seed noise and for the number of tasks compared per model (Holm).")
    else:
        how = ("These runs are not a seeds stage: each cell pools whatever configurations the search ran. † corrects "
               "for the number of tasks compared per model (Holm).")
    return SEEDS_CAPTION + (PAIRED_MARK if paired else WELCH_MARK) + " " + how + _training_caption(runs)


def _training_caption(runs: list[TrialRun]) -> str:
    """Where the seed runs held training data out: what they trained on and when they were scored, which a Δ against
    the papers' values (all the training data, the last epoch) mixes with the method."""
    held = sorted({h for r in runs if r.stage == "seeds" and (h := _holdout(r)) > 0})
    if not held:
        return ""
    shares = ", ".join(f"{100 * (1 - h):g} %" for h in held)
    return (f" Training data: the seed runs train on the remaining {shares} of the training set (holdout "
            f"{', '.join(f'{h:g}' for h in held)}) and are scored at the epoch the held-out share chose, not after "
            "the last epoch on all of it as the paper's runs are: a Δ against the paper mixes that with the method.")
