"""Tables computed from MLflow runs (the source of truth), in Markdown, CSV, LaTeX or Parquet.

* ``best`` — per model × task × method, the best trial (by its score: the task metric at its scored epoch, the last
  one unless held-out data chose another; or by its best epoch)
  with its hyperparameters and the number of trials it was chosen from.
* ``lambda-zeta`` — the paper's Table 2 layout: models × tasks, cells "λ | ζ" of the best I-STAR trial.
* ``seeds`` — the paper's Table 1 layout: model × method rows, task columns, mean ± std [95 % t-interval] over the
  seed runs (SQuAD as F1 / EM), ``*`` on the best row per model and task, ``†`` where I-STAR beats Base
  significantly (one-sided Welch's t-tests, Holm-corrected over the model's tasks, p < 0.05); the caption says how
  the configurations were chosen (dev set or held-out training data) and what ``†`` does not correct for. A method
  whose paper reports the median (IsoLayer) shows median ± std and the explained variance EV_1/EV_2/EV_3 of its
  sentence space in the run with the median EV_1, after a "Finetuned LM" row of its first stage's model.

Groups with no runs appear as missing ("—" or an empty score), never dropped.
"""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pandas as pd

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.methods import BASELINE, METHODS, PAPER_METHOD, has_second_stage, label, uses_lambda, uses_zeta
from istar_tune.metrics import FINETUNED_PREFIX, best_scored, score
from istar_tune.results.formats import MISSING
from istar_tune.tasks import EXTRACTIVE_QA, TASKS, get_task, is_shipped
from istar_tune.tracking.runs import TrialRun

KINDS = ("best", "lambda-zeta", "seeds")
SCOPES = ("last", "best-epoch")
SIGNIFICANCE = 0.05


def paper_results() -> dict:
    """The paper's published values shipped with the package: Table 2 (with its printed averages) and Table 1."""
    return json.loads(resources.files("istar_tune").joinpath("paper_results.json").read_text(encoding="utf-8"))


def _axes(runs: list[TrialRun], models, tasks, methods,
          paper_axes: bool = False) -> tuple[list[str], list[str], list[str]]:
    """The rows and columns shown: those asked for, else the models, tasks and methods the runs hold (every task of
    the paper with ``paper_axes``: ``--against-paper``)."""
    seen_models = list(dict.fromkeys(r.model for r in runs))
    seen_methods = [m for m in METHODS if any(r.method == m for r in runs)]
    own_tasks = list(dict.fromkeys(r.task for r in runs if not is_shipped(r.task)))  # the runs' own definitions
    seen_tasks = [t for t in TASKS if any(r.task == t for r in runs)] + own_tasks
    return (list(models or seen_models),
            [get_task(t).name for t in (tasks or ([*TASKS, *own_tasks] if paper_axes else seen_tasks))],
            list(methods or seen_methods))


def _candidates(runs: list[TrialRun]) -> dict[tuple, list[TrialRun]]:
    groups: dict[tuple, list[TrialRun]] = {}
    for run in runs:
        if run.status in tracking.COUNTED_STATUSES:
            groups.setdefault(run.group, []).append(run)
    return groups


def _percent(task: str, value: float) -> float:
    """A score in percent: SQuAD's F1 and EM already are; every other metric is a fraction."""
    return value if get_task(task).problem_type == EXTRACTIVE_QA else 100.0 * value


def lambda_groups(runs: list[TrialRun]) -> dict[tuple[str, float], list[TrialRun]]:
    """Finished runs by (method, λ): λ from the config for penalised methods, 0 for the others; Base first."""
    groups: dict[tuple[str, float], list[TrialRun]] = {}
    for run in runs:
        if run.status in tracking.COUNTED_STATUSES:
            lam = float(run.config.get("lam") or 0.0) if uses_lambda(run.method) else 0.0
            groups.setdefault((run.method, lam), []).append(run)
    return dict(sorted(groups.items(), key=lambda item: (item[0][0] != BASELINE, item[0][0], item[0][1])))


# -------------------------------------------------------------------------------------------------- best


def best_table(runs: list[TrialRun], scores: dict[str, float], models=None, tasks=None, methods=None,
               paper_axes: bool = False) -> pd.DataFrame:
    """``scores``: run id → the score it is ranked by (see :func:`run_scores`). Without axes asked for, only the
    groups the runs searched (every paper task with ``paper_axes``)."""
    searched = {r.group for r in runs}
    asked = bool(models or tasks or methods or paper_axes)
    models, tasks, methods = _axes(runs, models, tasks, methods, paper_axes)
    groups = _candidates(runs)
    rows = []
    for model in models:
        for task in tasks:
            for method in methods:
                if not asked and (model, task, method) not in searched:
                    continue
                candidates = [r for r in groups.get((model, task, method), []) if r.run_id in scores]
                best = best_scored(candidates, lambda r: r.config, lambda r: scores[r.run_id])
                config = best.config if best else {}
                rows.append({
                    "model": model, "task": task, "method": method, "metric": get_task(task).metric,
                    "score": scores[best.run_id] if best else math.nan,
                    "batch_size": config.get("batch_size"), "epochs": config.get("epochs"),
                    "learning_rate": config.get("learning_rate"),
                    "lam": config.get("lam") if uses_lambda(method) else None,
                    "zeta": config.get("zeta") if uses_zeta(method) else None,
                    "alpha": config.get("alpha") if has_second_stage(method) else None,
                    "trials": len(candidates), "trial_id": best.trial_id if best else None,
                })
    table = pd.DataFrame(rows, columns=["model", "task", "method", "metric", "score", "batch_size", "epochs",
                                        "learning_rate", "lam", "zeta", "alpha", "trials", "trial_id"])
    # Nullable types: a missing value stays missing (not NaN, not 16.0) in every format, parquet included.
    return table.astype({"score": "Float64", "batch_size": "Int64", "epochs": "Int64", "learning_rate": "Float64",
                         "lam": "Float64", "zeta": "Float64", "alpha": "Float64", "trials": "Int64"})


def run_scores(runs: list[TrialRun], scope: str = "last", history=None) -> dict[str, float]:
    """The score of each run: its task metric at its scored epoch (``metrics.score``: the last, or the one its
    held-out data chose), or (``best-epoch``) its best epoch on the validation set.

    ``history(run_id, metric)`` returns the metric's values per epoch (MLflow's metric history)."""
    if scope not in SCOPES:
        raise ConfigError(f"unknown scope {scope!r}: choose one of {', '.join(SCOPES)}")
    scores = {}
    for run in runs:
        metric = get_task(run.task).metric
        if scope == "last":
            if score(run.metrics, metric) is not None:
                scores[run.run_id] = score(run.metrics, metric)
        else:
            values = history(run.run_id, metric) if history else []
            if values:
                scores[run.run_id] = max(values)
    return scores


# ------------------------------------------------------------------------------------------- lambda-zeta


def _fmt_lambda_zeta(lam, zeta) -> str:
    return f"{lam:g} | {zeta:g}"


def lambda_zeta_table(runs: list[TrialRun], scores: dict[str, float], models=None, tasks=None,
                      against_paper: bool = False) -> pd.DataFrame:
    best = best_table(runs, scores, models, tasks, [PAPER_METHOD], paper_axes=against_paper)
    models, tasks, _ = _axes(runs, models, tasks, [PAPER_METHOD], against_paper)
    paper = paper_results()["lambda_zeta"] if against_paper else {}
    printed = paper_results()["lambda_zeta_average"] if against_paper else {}
    rows, typed = [], []
    for model in models:
        row: dict[str, object] = {"model": model}
        lams, zetas = [], []
        for task in tasks:
            found = best[(best.model == model) & (best.task == task)].iloc[0]
            published = paper.get(model, {}).get(task) or (None, None)
            typed.append({"model": model, "task": task, "lam": found.lam if found.trials > 0 else None,
                          "zeta": found.zeta if found.trials > 0 else None, "trials": int(found.trials),
                          "paper_lam": published[0], "paper_zeta": published[1]})
            cell = MISSING
            if found.trials > 0:
                lams.append(found.lam)
                zetas.append(found.zeta)
                cell = _fmt_lambda_zeta(found.lam, found.zeta)
            if against_paper:
                published = paper.get(model, {}).get(task)
                cell += f" (paper {_fmt_lambda_zeta(*published) if published else MISSING})"
            row[get_task(task).display_name] = cell
        row["average"] = _fmt_lambda_zeta(float(np.mean(lams)), float(np.mean(zetas))) if lams else MISSING
        if against_paper and model in printed:
            cells = np.mean(list(paper.get(model, {}).values()), axis=0)
            shown = _fmt_lambda_zeta(*printed[model])
            # The paper's printed average; where its own cells average otherwise at its precision (ALBERT's ζ), both.
            differs = not np.allclose(np.round(cells, 2), printed[model])
            row["average"] += f" (paper {shown}" + (f"; its cells average {_fmt_lambda_zeta(*np.round(cells, 3))})"
                                                    if differs else ")")
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["typed"] = pd.DataFrame(typed, columns=["model", "task", "lam", "zeta", "trials", "paper_lam",
                                                        "paper_zeta"]).astype(
        {"lam": "Float64", "zeta": "Float64", "trials": "Int64", "paper_lam": "Float64", "paper_zeta": "Float64"})
    return table


# ------------------------------------------------------------------------------------------------- seeds


def _reports_median(method: str) -> bool:
    """Whether the method's paper summarises seed runs by their median (and the EV of the median-EV_1 run)."""
    return method in METHODS and METHODS[method].seeds_summary == "median"


CONFIDENCE = 0.95
"""The level of each seeds cell's interval (Student's t over the seeds)."""
FINETUNED_LABEL = "Finetuned LM"
"""The row of a two-stage method's first-stage model (IsoLayer's paper: the fine-tuned LM without the layer)."""


def _seed_rows(methods: list[str]) -> list[tuple[str, str, str]]:
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


def interval(values: list[float]) -> tuple[float, float] | None:
    """The 95 % Student's t interval of the mean of ``values`` (``None`` for fewer than two)."""
    from scipy import stats

    if len(values) < 2:
        return None
    sem = stats.sem(values)
    if sem == 0:
        return float(np.mean(values)), float(np.mean(values))
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
    p_values = [ttest_ind(istar[t], base[t], equal_var=False, alternative="greater").pvalue for t in tasks]
    p_values = [1.0 if math.isnan(p) else p for p in p_values]  # identical constant seeds: no evidence
    reject = multipletests(p_values, alpha=SIGNIFICANCE, method="holm")[0]
    return {t for t, r in zip(tasks, reject) if r}


def seeds_table(runs: list[TrialRun], models=None, tasks=None, methods=None,
                against_paper: bool = False) -> pd.DataFrame:
    """Mean (or the method's paper's median) ± std [95 % interval] over each group's runs (the seed runs of the
    paper's second stage), in percent; ``attrs["caption"]`` says how their configurations were chosen."""
    paper = paper_results()["seeds"] if against_paper else {}
    iso_paper = paper_results()["isolayer_table3"] if against_paper else {}
    if against_paper:  # every cell of the paper's Table 1, ours marked missing where no run exists
        methods = methods or [m for m in METHODS if any(m in by_method for by_method in paper.values())
                              or any(r.method == m for r in runs)]
        shown = [*paper, *(iso_paper if any(has_second_stage(m) for m in methods) else [])]
        models = models or list(dict.fromkeys([*(r.model for r in runs), *shown]))
    models, tasks, methods = _axes(runs, models, tasks, methods, against_paper)
    groups = _candidates(runs)

    def values(model, task, method, metric):
        return [_percent(task, score(r.metrics, metric)) for r in groups.get((model, task, method), [])
                if score(r.metrics, metric) is not None]

    def center(method):
        return np.median if _reports_median(method) else np.mean

    def median_ev(model, task, method, prefix) -> str:
        """EV_1/EV_2/EV_3 of the run with the median EV_1 (the lower middle one of an even count)."""
        ev1 = f"{prefix}sentence_ev1"
        measured = [r for r in groups.get((model, task, method), []) if score(r.metrics, ev1) is not None]
        runs = sorted(measured, key=lambda r: (score(r.metrics, ev1), r.trial_id))
        if not runs:
            return ""
        chosen = runs[(len(runs) - 1) // 2].metrics
        return "; EV " + "/".join(f"{score(chosen, f'{prefix}sentence_ev{k}'):.2f}" for k in (1, 2, 3)
                                  if score(chosen, f"{prefix}sentence_ev{k}") is not None)

    rows = _seed_rows(methods)
    cells: dict[tuple, str] = {}
    typed: list[dict] = []
    for model in models:
        primary_of = {task: get_task(task).metric for task in tasks}
        marked = significant_tasks({t: values(model, t, PAPER_METHOD, m) for t, m in primary_of.items()},
                                   {t: values(model, t, BASELINE, m) for t, m in primary_of.items()})
        for task in tasks:
            primary = primary_of[task]
            means = {row: float(center(method)(v)) for row, method, prefix in rows
                     if (v := values(model, task, method, prefix + primary))}
            winner = max(means, key=means.get) if means else None
            for row, method, prefix in rows:
                parts = []
                for index, metric in enumerate(get_task(task).metrics):
                    observed = values(model, task, method, prefix + metric)
                    std = float(np.std(observed, ddof=1)) if len(observed) > 1 else 0.0
                    bounds = interval(observed)
                    if observed:
                        shown = f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else ""
                        parts.append(f"{center(method)(observed):.2f} ± {std:.2f}{shown}")
                    published = _published(paper, iso_paper, model, task, method, prefix, index)
                    typed.append({"model": model, "method": row, "task": task, "metric": metric,
                                  "summary": "median" if _reports_median(method) else "mean",
                                  "value": float(center(method)(observed)) if observed else None,
                                  "std": std if observed else None, "ci_low": bounds[0] if bounds else None,
                                  "ci_high": bounds[1] if bounds else None, "n": len(observed),
                                  "best": bool(observed) and row == winner,
                                  "significant": bool(observed) and method == PAPER_METHOD and task in marked,
                                  "paper_value": published[0], "paper_std": published[1]})
                cell = " / ".join(parts) if parts else MISSING
                if parts and row == winner:
                    cell += " *"
                if parts and method == PAPER_METHOD and task in marked:
                    cell += " †"
                if parts and _reports_median(method):
                    cell += median_ev(model, task, method, prefix)
                if against_paper:
                    cell += _paper_cell(paper, iso_paper, model, task, method, prefix, means.get(row))
                cells[(model, row, task)] = cell
    table = pd.DataFrame([{"model": model, "method": row,
                           **{get_task(task).display_name: cells[(model, row, task)] for task in tasks}}
                          for model in models for row, _, _ in rows])
    table.attrs["caption"] = seeds_caption(runs)
    table.attrs["typed"] = pd.DataFrame(typed, columns=TYPED_SEEDS).astype(
        {"value": "Float64", "std": "Float64", "ci_low": "Float64", "ci_high": "Float64", "n": "Int64",
         "best": "boolean", "significant": "boolean", "paper_value": "Float64", "paper_std": "Float64"})
    return table


TYPED_SEEDS = ["model", "method", "task", "metric", "summary", "value", "std", "ci_low", "ci_high", "n", "best",
               "significant", "paper_value", "paper_std"]
"""The seeds table as csv and parquet write it: a row per cell and metric, numbers in typed columns (percent)."""


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
    "holdout": "Configurations: each group's best on held-out training examples (choose_by: holdout); the dev set "
               "reported here chose nothing, so every method had the same chance. † corrects for seed noise and for "
               "the number of tasks compared per model (Holm).",
}


def seeds_caption(runs: list[TrialRun]) -> str:
    """The seeds table's caption: what the cells are, and how the configurations behind them were chosen."""
    chosen = sorted({r.chosen_by or "unknown" for r in runs if r.stage == "seeds"})
    if len(chosen) == 1 and chosen[0] in CHOICES:
        how = CHOICES[chosen[0]]
    elif chosen:
        how = (f"Configurations chosen by: {', '.join(chosen)} (runs without the tag were written before istar-tune "
               "recorded it). † corrects for seed noise and for the number of tasks compared per model (Holm).")
    else:
        how = ("These runs are not a seeds stage: each cell pools whatever configurations the search ran. † corrects "
               "for the number of tasks compared per model (Holm).")
    return CAPTIONS["seeds"] + " " + how


CAPTIONS = {
    "best": "Best trial per model × task × method; `trials`: how many it was chosen from.",
    "lambda-zeta": "λ | ζ of the best I-STAR trial per model and task; `average`: mean λ | mean ζ.",
    "seeds": "Mean ± std [95 % t-interval of the mean] over seed runs (percent; SQuAD F1 / EM; a median where the "
             "method's paper reports one). * best row per model and task; † I-STAR > Base, one-sided Welch's t-test, "
             "Holm-adjusted p < 0.05 over the tasks of the model.",
}


def build_table(tracking_uri: str, experiment: str, kind: str = "best", scope: str = "last", models=None, tasks=None,
                methods=None, against_paper: bool = False, simulated: bool = False) -> pd.DataFrame:
    """Read a search's runs from MLflow and build the table ``kind`` (of a rehearsal's runs with ``simulated``)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown table kind {kind!r}: choose one of {', '.join(KINDS)}")
    tracking.check_store(tracking_uri)
    runs = tracking.trial_runs(tracking_uri, experiment, simulated)
    if kind == "seeds":
        if runs and not any(r.stage == "seeds" for r in runs):
            raise ConfigError(f"experiment {experiment!r} is a search, not a seeds stage: --kind seeds summarises the "
                              "seed runs of one configuration per group, and a search's runs differ in their "
                              "hyperparameters; run a seeds stage (e.g. paper_seeds) and tabulate it, or use --kind "
                              "best")
        return seeds_table(runs, models, tasks, methods, against_paper)
    mlflow_client = tracking.client(tracking_uri)
    scores = run_scores(runs, scope, lambda run_id, metric: [m.value for m in
                                                              mlflow_client.get_metric_history(run_id, metric)])
    if kind == "lambda-zeta":
        return lambda_zeta_table(runs, scores, models, tasks, against_paper)
    table = best_table(runs, scores, models, tasks, methods, paper_axes=against_paper)
    if against_paper:
        published = paper_results()["lambda_zeta"]
        table["paper_lam_zeta"] = [
            _fmt_lambda_zeta(*published[m][t]) if method == PAPER_METHOD and t in published.get(m, {}) else None
            for m, t, method in zip(table.model, table.task, table.method)]
        if any(has_second_stage(m) for m in table.method):  # the IsoLayer paper's Table 2: one run per cell
            single = paper_results()["isolayer_table2"]
            table["paper_isolayer"] = [_fmt_isolayer(single.get(m, {}).get(t)) if has_second_stage(method) else None
                                       for m, t, method in zip(table.model, table.task, table.method)]
    return table


def _fmt_isolayer(cell: dict | None) -> str | None:
    if cell is None:
        return None
    before, after = cell["finetuned"], cell["isolayer"]
    return (f"Finetuned LM {before['score']:.2f} (IsoScore {before['sentence_isoscore']:g}) → +IsoLayer "
            f"{after['score']:.2f} ({after['sentence_isoscore']:g})")
