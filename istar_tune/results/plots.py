"""Plots of a search, from MLflow: the paper's Figure 3 and the metric per epoch of every trial.

* ``isoscore-vs-<metric>-<model>-<task>.png`` — eval IsoScore* against the task metric, one point per λ (Base at
  λ = 0) with error bars over that λ's runs (over seeds in a seeds stage);
* ``epochs-<model>-<task>.png`` — the task metric per epoch of every trial of that model × task.

Written to a folder and logged as artifacts of the search's parent run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.methods import label as method_label
from istar_tune.methods import uses_lambda
from istar_tune.metrics import score
from istar_tune.results.tables import lambda_groups
from istar_tune.tasks import get_task
from istar_tune.tracking.runs import TrialRun


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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


def isoscore_vs_metric(runs: list[TrialRun], model: str, task: str, path: Path) -> Path:
    metric = get_task(task).metric
    points = lambda_points([r for r in runs if r.model == model and r.task == task], metric)
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
    ax.set_title(f"{model} on {get_task(task).display_name}: isotropy against {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def metric_per_epoch(histories: dict[str, list[tuple[int, float]]], model: str, task: str, path: Path) -> Path:
    """``histories``: trial label → [(epoch, value), ...]."""
    metric = get_task(task).metric
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for label, points in sorted(histories.items()):
        points = sorted(points)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linewidth=1, alpha=0.8, label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{model} on {get_task(task).display_name}: {metric} per epoch of every trial")
    ax.grid(alpha=0.3)
    if len(histories) <= 12:
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(tracking_uri: str, experiment: str, output_dir: str | Path, log_to_mlflow: bool = True) -> list[Path]:
    """Both plots for every model × task of the search; logged to its parent run unless told not to."""
    tracking.check_store(tracking_uri)
    runs = [r for r in tracking.trial_runs(tracking_uri, experiment) if r.status in tracking.COUNTED_STATUSES]
    if not runs:
        raise ConfigError(f"experiment {experiment!r} at {tracking_uri} has no finished trial to plot")
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    client = tracking.client(tracking_uri)
    written = []
    for model, task in sorted({(r.model, r.task) for r in runs}):
        metric = get_task(task).metric
        subset = [r for r in runs if r.model == model and r.task == task]
        name = f"{_slug(model)}-{task}"
        written.append(isoscore_vs_metric(subset, model, task, output / f"isoscore-vs-{metric}-{name}.png"))
        histories = {f"{r.method} {r.trial_id}": [(m.step, m.value)
                                                  for m in client.get_metric_history(r.run_id, metric)]
                     for r in subset}
        written.append(metric_per_epoch(histories, model, task, output / f"epochs-{name}.png"))
    if log_to_mlflow:
        experiment_id = client.get_experiment_by_name(experiment).experiment_id
        parents = tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})
        for parent in parents[:1]:
            for path in written:
                client.log_artifact(parent.info.run_id, str(path), artifact_path="plots")
    return written
