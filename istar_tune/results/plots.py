"""Plots of a search, from MLflow: the paper's Figures 3, 7 and 8 from a study, and what a grid's runs show.

* A seeds stage (``stage: seeds``; a study when it varies one hyperparameter), per model × task × method, one point
  per value with error bars over its seeds only (every other hyperparameter is the same):

  * ``figure3-isoscore-vs-<metric>-<model>-<task>.png`` — λ varied: eval IsoScore* against the metric (Figure 3);
  * ``figure7-<metric>-vs-zeta-…``, ``figure8-<metric>-vs-layer-…`` (all layers dashed), ``study-<metric>-vs-<key>-…``
    — ζ, the layer or another hyperparameter varied: the metric against its value (Figures 7 and 8);
  * ``seeds-isoscore-vs-<metric>-…`` — nothing varied: each method's point over its seeds.

  Each image has a ``.json`` beside it with the plotted points (means, sample stds, the runs and seeds behind each).
* ``pooled-isoscore-vs-<metric>-<model>-<task>.png`` — a search's runs pooled per (method, λ): error bars mix the
  spread of every other hyperparameter with seed noise (the paper's Figure 3 is the study above, not this);
* ``budget-<metric>-<model>-<task>.png`` — a search's expected validation performance per method (``table --kind
  budget``): the expected best chosen score of n distinct configurations drawn from those it finished (without
  replacement, as a random search of n), ± its standard deviation over draws, n = 1 … N, and the dev score of the
  configuration chosen (dashed);
* ``epochs-<model>-<task>.png`` — the task metric per epoch of every trial of that model × task.

Written to a folder and logged as artifacts of the search's parent run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.methods import label as method_label
from istar_tune.methods import uses_lambda
from istar_tune.metrics import score
from istar_tune.results.budget import budget_table
from istar_tune.results.groups import varied
from istar_tune.results.tables import lambda_groups
from istar_tune.tasks import Task
from istar_tune.tracking.runs import TrialRun


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, ax, path: Path, legend: int | None, where: str = "best") -> Path:
    """Every figure's ending: a light grid, the legend (at font size ``legend``; ``None``: none), written at 120 dpi
    and closed."""
    ax.grid(alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=legend, loc=where)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text.strip("/"))


def lambda_points(runs: list[TrialRun], metric: str) -> list[dict]:
    """Per (method, λ): mean ± std of eval IsoScore* and of the metric over its runs."""
    measured = [r for r in runs if score(r.metrics, "eval_isoscore_star") is not None
                and score(r.metrics, metric) is not None]
    points = []
    for (method, lam), group in lambda_groups(measured).items():
        iso = [score(r.metrics, "eval_isoscore_star") for r in group]
        values = [score(r.metrics, metric) for r in group]
        points.append({"method": method, "lam": lam, "runs": len(group), "isoscore_mean": float(np.mean(iso)),
                       "isoscore_std": float(np.std(iso)), "metric_mean": float(np.mean(values)),
                       "metric_std": float(np.std(values))})
    return points


def pooled_isoscore_vs_metric(runs: list[TrialRun], model: str, task: Task, path: Path) -> Path:
    """A search's runs pooled per (method, λ): every other hyperparameter's spread is inside the error bars."""
    metric = task.metric
    points = lambda_points([r for r in runs if r.model == model and r.task == task.name], metric)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for point in points:
        label = method_label(point["method"])
        if uses_lambda(point["method"]):
            label += f" λ = {point['lam']:g}"
        ax.errorbar(point["isoscore_mean"], point["metric_mean"], xerr=point["isoscore_std"],
                    yerr=point["metric_std"], fmt="o", capsize=3, label=f"{label} (n = {point['runs']})")
    zetas = sorted({r.metrics["eval_zeta"] for r in runs if "eval_zeta" in r.metrics})
    ax.set_xlabel(f"eval IsoScore* (ζ = {', '.join(f'{z:g}' for z in zetas)})" if zetas else "eval IsoScore*")
    ax.set_ylabel(metric)
    ax.set_title(f"{model} on {task.display_name}: all runs pooled per λ\n(bars: every other "
                 "hyperparameter's spread and seed noise)", fontsize=9)
    return _save(plt, fig, ax, path, legend=7)


def metric_per_epoch(histories: dict[str, list[tuple[int, float]]], model: str, task: Task, path: Path) -> Path:
    """``histories``: trial label → [(epoch, value), ...]."""
    metric = task.metric
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for label, points in sorted(histories.items()):
        points = sorted(points)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linewidth=1, alpha=0.8, label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{model} on {task.display_name}: {metric} per epoch of every trial")
    return _save(plt, fig, ax, path, legend=6 if len(histories) <= 12 else None)


# ------------------------------------------------------------------------------ studies around a configuration

FIGURES = {"lam": "figure3", "lam-value": "figure3", "zeta": "figure7", "layer": "figure8"}
"""The paper's figure of a study varying each of these (others: ``study``)."""


def study_points(runs: list[TrialRun], metric: str) -> tuple[str | None, list[dict]]:
    """The varied hyperparameter of one group's seeds-stage runs (``None``: nothing varied) and a point per
    configuration: the mean and sample std over its seeds of the metric and of eval IsoScore*.

    Runs are grouped by every hyperparameter but the seed, so error bars hold seed noise only; more than one
    varied hyperparameter is refused (that is not a study)."""
    by_config: dict[tuple, list[TrialRun]] = {}
    for run in runs:
        if score(run.metrics, metric) is not None:
            key = tuple(sorted((k, repr(v)) for k, v in run.config.items() if k != "seed"))
            by_config.setdefault(key, []).append(run)
    differ = list(varied([r for group in by_config.values() for r in group]))
    if len(differ) > 1:
        raise ConfigError(f"the seed runs of {runs[0].model} × {runs[0].task} × {runs[0].method} differ in "
                          f"{', '.join(differ)}: a study varies one hyperparameter; plot each study's experiment")
    key = differ[0] if differ else None
    points = []
    for group in by_config.values():
        values = [score(r.metrics, metric) for r in group]
        iso = [v for r in group if (v := score(r.metrics, "eval_isoscore_star")) is not None]
        points.append({
            "method": group[0].method, "value": group[0].config.get(key) if key else None,
            "seeds": sorted(r.config.get("seed") for r in group), "runs": [r.run_id for r in group],
            "metric_mean": float(np.mean(values)), "metric_std": _sample_std(values),
            "isoscore_mean": float(np.mean(iso)) if iso else None, "isoscore_std": _sample_std(iso) if iso else None})
    points.sort(key=lambda p: (p["value"] is not None, p["value"] if p["value"] is not None else 0))
    return key, points


def _sample_std(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def study_figure(runs: list[TrialRun], output: Path) -> Path | None:
    """A seeds stage of one model × task drawn with error bars over seeds, its points beside it as JSON: a study
    per method (its varied hyperparameter), or, where no method varies one, the methods side by side."""
    model, task, _ = runs[0].group
    the_task = tracking.run_task(runs[0])
    metric = the_task.metric
    studies = {m: study_points([r for r in runs if r.method == m], metric) for m in sorted({r.method for r in runs})}
    varied = {m: key for m, (key, _) in studies.items() if key is not None}
    if len(varied) > 1 or (varied and len(studies) > 1):
        raise ConfigError(f"the seed runs of {model} × {task} hold more than one study ({', '.join(studies)}): "
                          "plot each study's experiment on its own")
    key = next(iter(varied.values()), None)
    points = [p for _, found in studies.values() for p in found]
    if not points:
        return None  # no run scored the task metric
    if key in (None, "lam") and any(p["isoscore_mean"] is None for p in points):
        if key is None:
            return None  # seeds without eval IsoScore*: nothing to draw them against
        key = "lam-value"  # λ against the metric (no eval IsoScore* was logged)
    by_isoscore = key in (None, "lam")
    method = next(iter(studies)) if key else None
    stem = (f"{'seeds' if key is None else FIGURES['lam']}-isoscore-vs-{metric}" if by_isoscore
            else f"{FIGURES.get(key, 'study')}-{metric}-vs-{key.removesuffix('-value')}")
    stem += f"-{_slug(model)}-{task}"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for point in points:
        seeds = len(point["seeds"])
        if by_isoscore:
            label = f"λ = {point['value']:g}" if key else method_label(point["method"])
            ax.errorbar(point["isoscore_mean"], point["metric_mean"], xerr=point["isoscore_std"],
                        yerr=point["metric_std"], fmt="o", capsize=3, label=f"{label} ({seeds} seeds)")
        elif point["value"] is None:  # e.g. I-STAR over every layer beside one layer at a time
            ax.axhline(point["metric_mean"], color="red", linestyle="--", label=f"all layers ({seeds} seeds)")
        else:
            ax.errorbar(point["value"], point["metric_mean"], yerr=point["metric_std"], fmt="o", capsize=3,
                        color="C0")
    zetas = sorted({r.metrics["eval_zeta"] for r in runs if "eval_zeta" in r.metrics})
    if by_isoscore:
        ax.set_xlabel(f"eval IsoScore* (ζ = {', '.join(f'{z:g}' for z in zetas)})" if zetas else "eval IsoScore*")
    else:
        ax.set_xlabel(AXIS_LABELS.get(key, key))
    ax.set_ylabel(metric)
    what = f"{method_label(method)}, {AXIS_LABELS.get(key, key)} varied" if key else "each method"
    ax.set_title(f"{model} on {the_task.display_name}: {what}\n(mean ± std over seeds, every other "
                 "hyperparameter fixed)", fontsize=9)
    path = _save(plt, fig, ax, output / f"{stem}.png", legend=7 if ax.get_legend_handles_labels()[0] else None)
    path.with_suffix(".json").write_text(json.dumps({"model": model, "task": task, "method": method, "metric": metric,
                                                     "varied": key, "points": points}, indent=1), encoding="utf-8")
    return path


def budget_figure(runs: list[TrialRun], model: str, task: Task, path: Path) -> Path | None:
    """The expected validation performance of one model × task's searched runs per method, its points beside it as
    JSON; nothing where no method finished two configurations (there is no curve to draw)."""
    table = budget_table(runs, every_n=True).dropna(subset=["n"])
    if table.empty or table["configurations"].max() < 2:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (method, rows) in enumerate(table.groupby("method", sort=False)):
        color, chosen_by = f"C{i}", rows["chosen_by"].iloc[0]
        ax.plot(rows["n"], rows["chosen"], color=color, marker=".",
                label=f"{method_label(method)}: {chosen_by} ({rows['configurations'].iloc[0]} configurations)")
        ax.fill_between(rows["n"], rows["chosen"] - rows["chosen_sd"], rows["chosen"] + rows["chosen_sd"],
                        color=color, alpha=0.15, linewidth=0)
        if (rows["dev"] != rows["chosen"]).any():
            ax.plot(rows["n"], rows["dev"], color=color, linestyle="--", label=f"{method_label(method)}: dev")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("distinct configurations drawn at random from the search's (n)")
    ax.set_ylabel(f"expected best {task.metric} (percent)")
    ax.set_title(f"{model} on {task.display_name}: expected validation performance\n(mean ± sd over draws of n; "
                 "dashed: the dev score of the configuration chosen)", fontsize=9)
    _save(plt, fig, ax, path, legend=7, where="lower right")
    path.with_suffix(".json").write_text(json.dumps({"model": model, "task": task.name, "metric": task.metric,
                                                     "points": table.to_dict("records")}, indent=1), encoding="utf-8")
    return path


AXIS_LABELS = {"zeta": "ζ", "lam": "λ", "lam-value": "λ", "layer": "layer (1-based)"}


def write_plots(tracking_uri: str, experiment: str, output_dir: str | Path, log_to_mlflow: bool = True) -> list[Path]:
    """The plots of every model × task of the search (the module's docstring); logged to its parent run unless told
    not to."""
    output = Path(output_dir)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output-dir {str(output)!r} is a file: name a folder for the plots (it is created if "
                          "missing)")
    tracking.check_store(tracking_uri)
    runs = [r for r in tracking.trial_runs(tracking_uri, experiment) if r.status in tracking.COUNTED_STATUSES]
    if not runs:
        raise ConfigError(f"experiment {experiment!r} at {tracking_uri} has no finished trial to plot")
    output.mkdir(parents=True, exist_ok=True)
    client = tracking.client(tracking_uri)
    written = []
    for model, task in sorted({(r.model, r.task) for r in runs}):
        subset = [r for r in runs if r.model == model and r.task == task]
        the_task = tracking.run_task(subset[0])
        metric = the_task.metric
        name = f"{_slug(model)}-{task}"
        searched = [r for r in subset if r.stage != "seeds"]
        if searched:
            written.append(pooled_isoscore_vs_metric(searched, model, the_task,
                                                     output / f"pooled-isoscore-vs-{metric}-{name}.png"))
            written.append(budget_figure(searched, model, the_task, output / f"budget-{metric}-{name}.png"))
        seeded = [r for r in subset if r.stage == "seeds"]
        if seeded:
            written.append(study_figure(seeded, output))
        histories = {f"{r.method} {r.trial_id}": [(m.step, m.value)
                                                  for m in client.get_metric_history(r.run_id, metric)]
                     for r in subset}
        written.append(metric_per_epoch(histories, model, the_task, output / f"epochs-{name}.png"))
    written = [path for path in written if path is not None]
    if log_to_mlflow:
        experiment_id = client.get_experiment_by_name(experiment).experiment_id
        parents = tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})
        for parent in parents[:1]:
            for path in written:
                client.log_artifact(parent.info.run_id, str(path), artifact_path="plots")
    return written
