"""The search's parent run in MLflow, as a person opening the UI reads it: the search's settings as params, a
description (what was searched, how, where its trials are), and when the search ends the best configuration of
each of its groups, as a table artifact (``best_configurations.json``, shown by MLflow's artifact viewer), as
Markdown, and in the description.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pandas as pd

from istar_tune import tracking
from istar_tune.config import RunSettings, group_key
from istar_tune.markdown import markdown
from istar_tune.metrics import HOLDOUT_PREFIX, SCORED_PREFIX, choosing_score, chosen_on, score
from istar_tune.search.plan import PlannedGroup
from istar_tune.search.spaces.space import SearchSpace
from istar_tune.tasks import definition_mapping

log = logging.getLogger(__name__)

MLFLOW_LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
"""The tag listing a run's table artifacts, which MLflow's UI shows as tables (``mlflow.utils.mlflow_tags``)."""
INTERNAL_SETTINGS = ("progress", "output_dir", "save_checkpoint")
"""Run settings every search trial fixes (no progress bars, no output folder): not worth a column."""
BEST_TABLE = "best_configurations.json"


def logged_settings(settings: RunSettings) -> dict[str, Any]:
    """The run settings a search's trials share, as its runs log them."""
    values = dataclasses.asdict(settings)
    return {k: v for k, v in values.items() if k not in INTERNAL_SETTINGS and v is not None}


def describe(mlflow_client, run_id: str, space: SearchSpace, planned: list[PlannedGroup],
             settings: RunSettings) -> None:
    """The parent run's params (the search's algorithm, scheduler, resources and run settings; written once: a
    resumed search keeps them) and its description."""
    from mlflow.entities import Param, RunTag

    params = {"algorithm": space.algorithm, "scheduler": space.scheduler, "stage": space.stage,
              "models": ",".join(space.models), "tasks": ",".join(space.tasks), "methods": ",".join(space.methods),
              "trials": sum(p.trials for p in planned), "groups": len(planned),
              "resources": f"cpu={space.cpu:g},gpu={space.gpu:g}",
              **{f"{tracking.SETTING_PREFIX}{k}": v for k, v in logged_settings(settings).items()}}
    if space.stage == "seeds":
        params.update({"best_of": ",".join(space.best_of), "seeds": ",".join(map(str, space.seeds)),
                       "choose_by": space.choose_by})
    run = mlflow_client.get_run(run_id)
    new = [Param(k, str(v)) for k, v in params.items() if k not in run.data.params]
    for start in range(0, len(new), 100):
        mlflow_client.log_batch(run_id, params=new[start:start + 100])
    mlflow_client.log_batch(run_id, tags=[RunTag(tracking.NOTE_TAG, _description(space, planned))])
    log_task_definitions(mlflow_client, run_id, [space.task(name) for name in space.tasks])


MODEL_TRAINING = tracking.MODEL_TRAINING
SHARED_VIEW = "istar-tune"
"""The key of the runs-table view each search's experiment shares (MLflow's ``mlflow.sharedViewState.<key>`` tag,
opened by ``#/experiments/<id>/runs?viewStateShareKey=<key>``)."""


def runs_view(space: SearchSpace) -> dict[str, Any]:
    """The runs table as a search is read: ranked by the value that chose (:func:`istar_tune.metrics.choosing_score`:
    with held-out data the held-out metric at the scored epoch, its dev value beside it; else the dev metric), the
    hyperparameters it searched and each trial's status as columns, and every run in the charts (MLflow's UI draws
    the first 10 unless told ``SHOW_ALL``)."""
    metrics = [f"metrics.`{key}`" for key in view_metrics(space)]
    domains = [space.hyperparameters, *space.method_hyperparameters.values()]
    searched = [k for k in dict.fromkeys(k for d in domains for k in d) if any(
        k in d and (d[k].kind != "constant") for d in domains)]
    if space.stage == "seeds":  # each group's aggregate run, its seeds folded under it: MLflow nests runs under
        # their parent only in an order not by a metric, so the newest first, the aggregates' values as columns
        searched = [*([space.vary[0]] if space.vary else []), "seed"]
        mean, _, n, low, high, difference, _ = tracking.SEED_AGGREGATES
        columns = [*(f"metrics.`{k}`" for k in (mean, low, high, n, difference)), *metrics,
                   f"tags.`{tracking.TAG_STATUS}`", *(f"params.`{k}`" for k in searched)]
        return {"selectedColumns": columns, "orderByKey": "attributes.start_time", "orderByAsc": False,
                "runsHiddenMode": "SHOW_ALL"}
    columns = [f"tags.`{tracking.TAG_CHOSEN}`", *metrics, f"tags.`{tracking.TAG_STATUS}`",
               *(f"params.`{k}`" for k in searched)]
    return {"selectedColumns": columns, "orderByKey": metrics[0], "orderByAsc": False, "runsHiddenMode": "SHOW_ALL"}


def view_metrics(space: SearchSpace) -> list[str]:
    """The metrics the runs view shows, the choosing one first: with held-out data each task's held-out value at the
    scored epoch then its dev value there (``scored_holdout_<metric>``, ``scored_<metric>``); else the dev value."""
    metrics = list(dict.fromkeys(space.task(task).metric for task in space.tasks))
    if space.run_settings().holdout is None:
        return metrics
    return [*(SCORED_PREFIX + HOLDOUT_PREFIX + m for m in metrics), *(SCORED_PREFIX + m for m in metrics)]


def share_view(mlflow_client, experiment_id: str, space: SearchSpace) -> str:
    """Save the search's runs-table view on its experiment and link it from the experiment's description (the first
    thing its page shows); the link's path within the MLflow UI."""
    link = f"#/experiments/{experiment_id}/runs?viewStateShareKey={SHARED_VIEW}&{MODEL_TRAINING}"
    mlflow_client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{SHARED_VIEW}",
                                     json.dumps(runs_view(space)))
    ranked = ("the held-out value that chose, best first, its dev value beside it"
              if space.run_settings().holdout is not None else "the dev value, which chose (no data held out), best "
              "first")
    shown = f"ranked by {ranked}; the searched hyperparameters and each trial's status as columns"
    if space.stage == "seeds":
        shown = ("newest first, each group's seeds folded under its aggregate run, whose mean, interval and "
                 "difference from Base are columns")
    mlflow_client.set_experiment_tag(experiment_id, tracking.NOTE_TAG, (
        f"**{space.name}**: [compare its trials]({link}) ({shown}). Each trial is a run named by its configuration; "
        "the search's own run holds its settings and, once it ends, the best configuration per model × task × "
        "method."))
    return link


def log_task_definitions(mlflow_client, run_id: str, tasks) -> None:
    """Each task of the search that is not shipped, as the trials read it: its resolved definition (absolute files,
    class names, sizes, checksums) as an artifact, and its files' checksums as a tag, so a table traces back to the
    exact data."""
    import yaml

    for task in tasks:
        if task.shipped:
            continue
        mlflow_client.log_text(run_id, yaml.safe_dump(definition_mapping(task), sort_keys=False, allow_unicode=True),
                               f"{tracking.TASKS_FOLDER}/{task.name}.yaml")
        files = "; ".join(f"{split} {task.split_source(split) or 'hub'} {value}"
                          for split, value in task.checksums.items())
        mlflow_client.set_tag(run_id, f"{tracking.TAG_TASK_FILES}.{task.name}",
                              (files or f"hub {task.hub.path if task.hub else ''}")[:tracking.MAX_TAG_CHARS])


def _description(space: SearchSpace, planned: list[PlannedGroup]) -> str:
    trials = sum(p.trials for p in planned)
    what = (f"re-runs the best configuration of each group of {', '.join(space.best_of)} with seeds "
            f"{list(space.seeds)}" if space.stage == "seeds" else f"searches {space.algorithm}"
            + (f" with {space.scheduler}" if space.scheduler != "none" else ""))
    return (f"**{space.name}** ({space.path}) {what}: {trials} configurations in {len(planned)} model × task × "
            f"method groups ({', '.join(space.models)} × {', '.join(space.tasks)} × {', '.join(space.methods)}). "
            "Each configuration is a run of its own in this experiment, named by its method and hyperparameters and "
            "tagged with this run's id (`istar_tune.search_run_id`); the experiment's description links a table of "
            "them (or search `tags.\"istar_tune.role\" = 'trial'`).")


def best_rows(tracking_uri: str, name: str, planned: list[PlannedGroup], simulated: bool,
              chosen: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The best trial of each planned group (:func:`istar_tune.tracking.best_trials`, the tables' rule, ties broken
    as it breaks them): its group, score, run name and the hyperparameters its method reads; ``chosen`` collects each
    best run's id and the epoch it was scored at."""
    groups = sorted({(p.group.model, p.group.task, p.group.method) for p in planned})
    metrics = {p.group.task: p.group.task_object.metric for p in planned}
    best = tracking.best_trials(tracking_uri, name, simulated, groups=groups, metrics=metrics)
    rows = []
    for (model, task, method), run in sorted(best.items()):
        metric = metrics[task]
        values = {k: v for k, v in tracking.logged_params(run.config).items()
                  if k not in ("model", "task", "method") and k in run.config}
        rows.append({"model": model, "task": task, "method": method, "metric": metric,
                     "score": score(run.metrics, metric),
                     **({"held_out": choosing_score(run.metrics, metric)}  # what chose it; the dev score did not
                        if chosen_on(run.metrics, metric) == "holdout" else {}),
                     "run": tracking.configuration_words(run.config),  # its model and task: columns
                     "trial_id": run.trial_id, **values})
        if chosen is not None:
            chosen[run.run_id] = int(run.metrics.get("scored_epoch", run.metrics.get("epoch", run.config["epochs"])))
    return rows


def _mark_chosen(mlflow_client, experiment_id: str, chosen: dict[str, int], groups: set[str]) -> None:
    """Tag the runs the search chose (the saved view's first column: ``yes (epoch N)``); a run of these groups an
    earlier end chose (before a resume) loses its mark."""
    earlier = mlflow_client.search_runs([experiment_id], f"tags.`{tracking.TAG_CHOSEN}` LIKE 'yes%'", max_results=5000)
    for run in earlier:
        if run.info.run_id not in chosen and run.data.tags.get(tracking.TAG_GROUP) in groups:
            mlflow_client.delete_tag(run.info.run_id, tracking.TAG_CHOSEN)
    for run_id, epoch in chosen.items():
        mlflow_client.set_tag(run_id, tracking.TAG_CHOSEN, f"yes (epoch {epoch})")


def log_best(tracking_uri: str, name: str, run_id: str, planned: list[PlannedGroup], simulated: bool) -> None:
    """The best configuration of each searched group: a table artifact, Markdown, and the description's end. A
    failure is logged and never fails the search (its trials are in MLflow either way)."""
    try:
        chosen: dict[str, int] = {}
        rows = best_rows(tracking_uri, name, planned, simulated, chosen)
        if not rows:
            return
        mlflow_client = tracking.client(tracking_uri)
        _mark_chosen(mlflow_client, mlflow_client.get_run(run_id).info.experiment_id, chosen,
                     {group_key({"model": p.group.model, "task": p.group.task, "method": p.group.method})
                      for p in planned})
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = pd.DataFrame({c: [row.get(c) for row in rows] for c in columns})
        # MlflowClient.log_table appends to a table the run holds already (each --resume would add the rows again):
        # the same file, written whole, marked as a table as log_table marks it.
        mlflow_client.log_text(run_id, table.to_json(orient="split", index=False, date_format="iso"), BEST_TABLE)
        logged = json.loads(mlflow_client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
        if {"path": BEST_TABLE, "type": "table"} not in logged:
            logged.append({"path": BEST_TABLE, "type": "table"})
            mlflow_client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps(logged))
        text = markdown(pd.DataFrame(rows))
        mlflow_client.log_text(run_id, text + "\n", "best_configurations.md")
        note = mlflow_client.get_run(run_id).data.tags.get(tracking.NOTE_TAG, "").split("\n\n**Best configuration")[0]
        mlflow_client.set_tag(run_id, tracking.NOTE_TAG, f"{note}\n\n**Best configuration of each group**\n\n{text}\n")
    except Exception as err:  # noqa: BLE001 - the summary is a convenience; the trials are recorded already
        log.warning("could not log the best configurations to the search's run: %s", err)
