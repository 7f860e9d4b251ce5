"""Tables computed from MLflow runs (the source of truth), in Markdown, CSV, LaTeX or Parquet.

* ``best`` — per model × task × method, the best trial (by its score: the task metric at its scored epoch, the last
  one unless held-out data chose another; or by its best epoch)
  with its hyperparameters and the number of trials it was chosen from.
* ``lambda-zeta`` — the paper's Table 2 layout: models × tasks, cells "λ | ζ" of the best I-STAR trial.
* ``seeds`` — the paper's Table 1 layout: model × method rows, task columns, mean ± std over the seed runs
  (SQuAD as F1 / EM), ``*`` on the best method per model and task, ``†`` where I-STAR beats Base significantly
  (one-sided Welch's t-test, p < 0.05). A method whose paper reports the median (IsoLayer) shows median ± std and
  the explained variance EV_1/EV_2/EV_3 of its sentence space in the run with the median EV_1.

Groups with no runs appear as missing ("—" or an empty score), never dropped.
"""

from __future__ import annotations

import io
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.methods import BASELINE, METHODS, PAPER_METHOD, has_second_stage, label, uses_lambda, uses_zeta
from istar_tune.metrics import best_scored, score
from istar_tune.tasks import TASKS, get_task
from istar_tune.tracking.runs import TrialRun

KINDS = ("best", "lambda-zeta", "seeds")
FORMATS = ("md", "csv", "latex", "parquet")
SCOPES = ("last", "best-epoch")
MISSING = "—"
SIGNIFICANCE = 0.05


def paper_results() -> dict:
    """The paper's published values shipped with the package: Table 2 (with its printed averages) and Table 1."""
    return json.loads(resources.files("istar_tune").joinpath("paper_results.json").read_text(encoding="utf-8"))


def _axes(runs: list[TrialRun], models, tasks, methods) -> tuple[list[str], list[str], list[str]]:
    seen_models = list(dict.fromkeys(r.model for r in runs))
    seen_methods = [m for m in METHODS if any(r.method == m for r in runs)]
    return (list(models or seen_models), [get_task(t).name for t in (tasks or TASKS)],
            list(methods or seen_methods))


def _candidates(runs: list[TrialRun]) -> dict[tuple, list[TrialRun]]:
    groups: dict[tuple, list[TrialRun]] = {}
    for run in runs:
        if run.status in tracking.COUNTED_STATUSES:
            groups.setdefault(run.group, []).append(run)
    return groups


def _percent(metric: str, value: float) -> float:
    return value if metric in ("f1", "exact_match") else 100.0 * value


def lambda_groups(runs: list[TrialRun]) -> dict[tuple[str, float], list[TrialRun]]:
    """Finished runs by (method, λ): λ from the config for penalised methods, 0 for the others; Base first."""
    groups: dict[tuple[str, float], list[TrialRun]] = {}
    for run in runs:
        if run.status in tracking.COUNTED_STATUSES:
            lam = float(run.config.get("lam") or 0.0) if uses_lambda(run.method) else 0.0
            groups.setdefault((run.method, lam), []).append(run)
    return dict(sorted(groups.items(), key=lambda item: (item[0][0] != BASELINE, item[0][0], item[0][1])))


# -------------------------------------------------------------------------------------------------- best


def best_table(runs: list[TrialRun], scores: dict[str, float], models=None, tasks=None, methods=None) -> pd.DataFrame:
    """``scores``: run id → the score it is ranked by (see :func:`run_scores`)."""
    models, tasks, methods = _axes(runs, models, tasks, methods)
    groups = _candidates(runs)
    rows = []
    for model in models:
        for task in tasks:
            for method in methods:
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
    best = best_table(runs, scores, models, tasks, [PAPER_METHOD])
    models, tasks, _ = _axes(runs, models, tasks, [PAPER_METHOD])
    paper = paper_results()["lambda_zeta"] if against_paper else {}
    printed = paper_results()["lambda_zeta_average"] if against_paper else {}
    rows = []
    for model in models:
        row: dict[str, object] = {"model": model}
        lams, zetas = [], []
        for task in tasks:
            found = best[(best.model == model) & (best.task == task)].iloc[0]
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
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------- seeds


def _reports_median(method: str) -> bool:
    """Whether the method's paper summarises seed runs by their median (and the EV of the median-EV_1 run)."""
    return method in METHODS and METHODS[method].seeds_summary == "median"


def seeds_table(runs: list[TrialRun], models=None, tasks=None, methods=None,
                against_paper: bool = False) -> pd.DataFrame:
    """Mean (or the method's paper's median) ± std over each group's runs (the seed runs of the paper's second
    stage), in percent."""
    from scipy.stats import ttest_ind

    paper = paper_results()["seeds"] if against_paper else {}
    if against_paper:  # every cell of the paper's Table 1, ours marked missing where no run exists
        models = models or list(dict.fromkeys([*(r.model for r in runs), *paper]))
        methods = methods or [m for m in METHODS if any(m in by_method for by_method in paper.values())]
    models, tasks, methods = _axes(runs, models, tasks, methods)
    groups = _candidates(runs)

    def values(model, task, method, metric):
        return [_percent(metric, score(r.metrics, metric)) for r in groups.get((model, task, method), [])
                if score(r.metrics, metric) is not None]

    def center(method):
        return np.median if _reports_median(method) else np.mean

    def median_ev(model, task, method) -> str:
        """EV_1/EV_2/EV_3 of the run with the median EV_1 (the lower middle one of an even count)."""
        measured = [r for r in groups.get((model, task, method), []) if score(r.metrics, "sentence_ev1") is not None]
        runs = sorted(measured, key=lambda r: (score(r.metrics, "sentence_ev1"), r.trial_id))
        if not runs:
            return ""
        chosen = runs[(len(runs) - 1) // 2].metrics
        return "; EV " + "/".join(f"{score(chosen, f'sentence_ev{k}'):.2f}" for k in (1, 2, 3)
                                  if score(chosen, f"sentence_ev{k}") is not None)

    cells: dict[tuple, str] = {}
    for model in models:
        for task in tasks:
            primary = get_task(task).metric
            means = {m: float(center(m)(v)) for m in methods if (v := values(model, task, m, primary))}
            winner = max(means, key=means.get) if means else None
            istar, base = values(model, task, PAPER_METHOD, primary), values(model, task, BASELINE, primary)
            significant = (len(istar) > 1 and len(base) > 1 and np.mean(istar) > np.mean(base)
                           and ttest_ind(istar, base, equal_var=False, alternative="greater").pvalue < SIGNIFICANCE)
            for method in methods:
                parts = []
                for metric in get_task(task).metrics:
                    observed = values(model, task, method, metric)
                    if observed:
                        std = float(np.std(observed, ddof=1)) if len(observed) > 1 else 0.0
                        parts.append(f"{center(method)(observed):.2f} ± {std:.2f}")
                cell = " / ".join(parts) if parts else MISSING
                if parts and method == winner:
                    cell += " *"
                if parts and method == PAPER_METHOD and significant:
                    cell += " †"
                if parts and _reports_median(method):
                    cell += median_ev(model, task, method)
                if against_paper:
                    published = paper.get(model, {}).get(method, {}).get(task)  # [[mean, std] per metric]
                    if published is None:
                        cell += f" (paper {MISSING})"
                    else:
                        shown = " / ".join(f"{mean:.2f} ± {std:.2f}" for mean, std in published)
                        delta = f", Δ {means[method] - published[0][0]:+.2f}" if method in means else ""
                        cell += f" (paper {shown}{delta})"
                cells[(model, method, task)] = cell
    rows = []
    for model in models:
        for method in methods:
            row = {"model": model, "method": label(method) + (" (median)" if _reports_median(method) else "")}
            for task in tasks:
                row[get_task(task).display_name] = cells[(model, method, task)]
            rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------- output


def render(table: pd.DataFrame, fmt: str, output: str | Path | None = None, caption: str = "") -> str | None:
    """The table as text (md, csv, latex), or written to ``output`` (required for parquet, optional otherwise)."""
    if output is not None and not Path(output).parent.is_dir():
        raise ConfigError(f"--output {str(output)!r}: the folder {str(Path(output).parent)!r} does not exist; "
                          "create it or write elsewhere")
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if output is None:
            raise ConfigError("parquet is binary: give --output FILE.parquet")
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pandas(table, preserve_index=False), str(output))
        return None
    if fmt == "csv":
        buffer = io.StringIO()
        table.to_csv(buffer, index=False)
        text = buffer.getvalue()
    elif fmt == "latex":
        text = table.to_latex(index=False, na_rep=MISSING, float_format=_float, caption=caption or None)
    else:
        text = markdown(table) + (f"\n\n{caption}\n" if caption else "\n")
    if output is not None:
        Path(output).write_text(text, encoding="utf-8")
        return None
    return text


def _float(value: float) -> str:
    return f"{value:.4g}"


def markdown(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return MISSING
        if isinstance(value, float):
            return _float(value)
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(str(c) for c in table.columns) + " |"
    rule = "| " + " | ".join("---" for _ in table.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body])


CAPTIONS = {
    "best": "Best trial per model × task × method; `trials`: how many it was chosen from.",
    "lambda-zeta": "λ | ζ of the best I-STAR trial per model and task; `average`: mean λ | mean ζ.",
    "seeds": "Mean ± std over seed runs (percent; SQuAD F1 / EM). * best method per model and task; "
             "† I-STAR > Base, one-sided Welch's t-test p < 0.05.",
}


def build_table(tracking_uri: str, experiment: str, kind: str = "best", scope: str = "last", models=None, tasks=None,
                methods=None, against_paper: bool = False, simulated: bool = False) -> pd.DataFrame:
    """Read a search's runs from MLflow and build the table ``kind`` (of a rehearsal's runs with ``simulated``)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown table kind {kind!r}: choose one of {', '.join(KINDS)}")
    tracking.check_store(tracking_uri)
    runs = tracking.trial_runs(tracking_uri, experiment, simulated)
    if kind == "seeds":
        return seeds_table(runs, models, tasks, methods, against_paper)
    mlflow_client = tracking.client(tracking_uri)
    scores = run_scores(runs, scope, lambda run_id, metric: [m.value for m in
                                                              mlflow_client.get_metric_history(run_id, metric)])
    if kind == "lambda-zeta":
        return lambda_zeta_table(runs, scores, models, tasks, against_paper)
    table = best_table(runs, scores, models, tasks, methods)
    if against_paper:
        published = paper_results()["lambda_zeta"]
        table["paper_lam_zeta"] = [
            _fmt_lambda_zeta(*published[m][t]) if method == PAPER_METHOD and t in published.get(m, {}) else None
            for m, t, method in zip(table.model, table.task, table.method)]
    return table
