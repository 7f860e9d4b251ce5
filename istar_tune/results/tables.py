"""Tables computed from MLflow runs (the source of truth), in Markdown, CSV, LaTeX or Parquet.

* ``best`` — per model × task × method, the best trial (by its score: the task metric at its scored epoch, the last
  one unless held-out data chose another; or by its best epoch)
  with its hyperparameters and the number of trials it was chosen from.
* ``lambda-zeta`` — the paper's Table 2 layout: models × tasks, cells "λ | ζ" of the best I-STAR trial.
* ``seeds`` — the paper's Table 1 layout (:mod:`istar_tune.results.seeds`).
* ``budget`` — expected validation performance: the best of n configurations, n = 1 … N
  (:mod:`istar_tune.results.budget`).

Groups with no runs appear as missing ("—" or an empty score), never dropped.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.markdown import MISSING
from istar_tune.methods import BASELINE, PAPER_METHOD, has_second_stage, uses_lambda, uses_zeta
from istar_tune.metrics import best_scored, choosing_score, chosen_on, score
from istar_tune.results.budget import BUDGET_CAPTION, budget_table
from istar_tune.results.groups import axes, candidates, paper_results, refuse_mixed_exactness
from istar_tune.results.robust import comparisons, power_table, robust_table, significant
from istar_tune.results.seeds import SEEDS_CAPTION, seeds_table
from istar_tune.tasks import get_task
from istar_tune.tracking.runs import TrialRun, run_task, run_tasks

KINDS = ("best", "lambda-zeta", "seeds", "budget")
SCOPES = ("last", "best-epoch")
STATS = ("paper", "robust", "all")


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
    """``scores``: run id → the value it is ranked by (see :func:`run_scores`). The ``score`` column is the chosen
    run's dev score (its task metric at its scored epoch); ``held_out``, where held-out data chose, the held-out value
    that chose it. Without axes asked for, only the groups the runs searched (every paper task with
    ``paper_axes``)."""
    searched = {r.group for r in runs}
    asked = bool(models or tasks or methods or paper_axes)
    models, tasks, methods = axes(runs, models, tasks, methods, paper_axes)
    groups, known = candidates(runs), run_tasks(runs)
    rows = []
    for model in models:
        for task in tasks:
            for method in methods:
                if not asked and (model, task, method) not in searched:
                    continue
                ranked = [r for r in groups.get((model, task, method), []) if r.run_id in scores]
                best = best_scored(ranked, lambda r: r.config, lambda r: scores[r.run_id])
                config = best.config if best else {}
                rows.append({
                    "model": model, "task": task, "method": method, "metric": get_task(task, known).metric_text,
                    "score": _dev_score(best, scores) if best else math.nan,
                    "held_out": (scores[best.run_id] if best and chosen_on(best.metrics, run_task(best).metric)
                                 == "holdout" else None),
                    "batch_size": config.get("batch_size"), "epochs": config.get("epochs"),
                    "learning_rate": config.get("learning_rate"),
                    "lam": config.get("lam") if uses_lambda(method) else None,
                    "zeta": config.get("zeta") if uses_zeta(method) else None,
                    "alpha": config.get("alpha") if has_second_stage(method) else None,
                    "trials": len(ranked), "trial_id": best.trial_id if best else None,
                })
    table = pd.DataFrame(rows, columns=["model", "task", "method", "metric", "score", "held_out", "batch_size",
                                        "epochs", "learning_rate", "lam", "zeta", "alpha", "trials", "trial_id"])
    # Nullable types: a missing value stays missing (not NaN, not 16.0) in every format, parquet included.
    table = table.astype({"score": "Float64", "held_out": "Float64", "batch_size": "Int64", "epochs": "Int64",
                          "learning_rate": "Float64", "lam": "Float64", "zeta": "Float64", "alpha": "Float64",
                          "trials": "Int64"})
    table.attrs["caption"] = best_caption(table)
    return table


def _dev_score(run: TrialRun, scores: dict[str, float]) -> float:
    """What the ``score`` column shows of a chosen run: its dev score where held-out data chose, else its ranking
    value (the dev score at its scored epoch, or its best epoch's)."""
    metric = run_task(run).metric
    if chosen_on(run.metrics, metric) == "holdout":
        value = score(run.metrics, metric)
        return math.nan if value is None else value
    return scores[run.run_id]


def best_caption(table: pd.DataFrame) -> str:
    """The best table's caption: which value chose each row's configuration, and which the ``score`` column is."""
    held = table["held_out"].notna()
    if not held.any():
        how = ("chosen by the dev score shown (the task metric at its scored epoch, on the validation set: no trial "
               "held training data out)")
    elif held[table["trials"] > 0].all():
        how = ("chosen by `held_out`, the task metric on the training examples its trials held out (at the epoch "
               "they chose); `score` is the dev score of that epoch, which chose nothing")
    else:
        how = ("chosen by `held_out` where a group's trials held training data out (`score`, the dev score, then chose "
               "nothing), else by the dev score `score`")
    return f"Best trial per model × task × method, {how}; `trials`: how many it was chosen from."

def run_scores(runs: list[TrialRun], scope: str = "last", history=None) -> dict[str, float]:
    """The value each run is ranked by: the one that chooses (``metrics.choosing_score``: with held-out data the
    held-out metric at the epoch it chose, else the task metric at its scored epoch), or (``best-epoch``) its best
    epoch on the validation set (refused for runs that held data out: the dev set would choose).

    ``history(run_id, metric)`` returns the metric's values per epoch (MLflow's metric history)."""
    if scope not in SCOPES:
        raise ConfigError(f"unknown scope {scope!r}: choose one of {', '.join(SCOPES)}")
    scores = {}
    for run in runs:
        metric = run_task(run).metric
        if scope == "last":
            if choosing_score(run.metrics, metric) is not None:
                scores[run.run_id] = choosing_score(run.metrics, metric)
        else:
            if chosen_on(run.metrics, metric) == "holdout":
                raise ConfigError(f"--scope best-epoch ranks runs by their best dev epoch, but run {run.run_id} held "
                                  "training data out to choose its epoch: the dev set would choose what it then "
                                  "scores; leave --scope out")
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
    models, tasks, _ = axes(runs, models, tasks, [PAPER_METHOD], against_paper)
    paper = paper_results()["lambda_zeta"] if against_paper else {}
    printed = paper_results()["lambda_zeta_average"] if against_paper else {}
    rows, typed, known = [], [], run_tasks(runs)
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
            row[get_task(task, known).display_name] = cell
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


CAPTIONS = {
    "best": "Best trial per model × task × method, chosen by the dev score shown; `trials`: how many it was chosen "
            "from.",
    "lambda-zeta": "λ | ζ of the best I-STAR trial per model and task; `average`: mean λ | mean ζ.",
    "seeds": SEEDS_CAPTION,
    "budget": BUDGET_CAPTION,
}


def build_table(tracking_uri: str, experiment: str, kind: str = "best", scope: str = "last", models=None, tasks=None,
                methods=None, against_paper: bool = False, simulated: bool = False,
                mix_exactness: bool = False, stats: str = "paper", with_replacement: bool = False) -> pd.DataFrame:
    """Read a search's runs from MLflow and build the table ``kind`` (of a rehearsal's runs with ``simulated``);
    runs with different exactness settings are refused unless ``mix_exactness``. A seeds table's ``stats``: the
    paper's (``paper``), the robust ones against Base (``robust``: :mod:`~istar_tune.results.robust`), or both
    (``all``: the paper's table, the robust one in ``attrs["robust"]``). A budget table's draws are without
    replacement unless ``with_replacement`` (Dodge et al.'s)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown table kind {kind!r}: choose one of {', '.join(KINDS)}")
    if with_replacement and kind != "budget":
        raise ConfigError(f"--with-replacement draws a budget curve's configurations as Dodge et al. do: it goes with "
                          f"--kind budget, not --kind {kind}")
    if stats not in STATS or (stats != "paper" and kind != "seeds"):
        raise ConfigError(f"--stats {stats!r}: choose one of {', '.join(STATS)}; robust statistics compare a seeds "
                          f"stage's methods with Base (--kind seeds), not --kind {kind}")
    tracking.check_store(tracking_uri)
    runs = tracking.trial_runs(tracking_uri, experiment, simulated)
    refuse_mixed_exactness(runs, experiment, mix_exactness, models, tasks, methods)
    if kind == "seeds":
        if runs and not any(r.stage == "seeds" for r in runs):
            raise ConfigError(f"experiment {experiment!r} is a search, not a seeds stage: --kind seeds summarises the "
                              "seed runs of one configuration per group, and a search's runs differ in their "
                              "hyperparameters; run a seeds stage (e.g. paper_seeds) and tabulate it, or use --kind "
                              "best")
        found = comparisons(runs, models, tasks, methods)  # every method against Base, paired by seed: once
        if stats == "robust":
            return robust_table(runs, found=found)
        table = seeds_table(runs, models, tasks, methods, against_paper,
                            paired_marks=significant(found) if stats == "all" else None)
        if stats == "all":
            table.attrs["robust"] = robust_table(runs, found=found)
        table.attrs["power"] = power_table(runs, found=found)
        return table
    if kind == "budget":
        return budget_table(runs, models, tasks, methods, with_replacement=with_replacement)
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
