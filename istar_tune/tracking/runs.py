"""Reading trials back from MLflow (the source of truth for tables, plots and the seeds stage): typed
hyperparameters and last metric values per run, simulated and real runs never mixed, and each group's best trial by
the one rule (:func:`istar_tune.metrics.best_scored`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, from_dict, group_key
from istar_tune.errors import ConfigError
from istar_tune.metrics import SCORED_PREFIX, best_scored, choice_metric, choosing
from istar_tune.tasks import Task, get_task, is_shipped, task_from_facts
from istar_tune.tracking.naming import SETTING_PREFIX
from istar_tune.tracking.store import (
    COUNTED_STATUSES,
    TAG_CHOSEN_BY,
    TAG_GROUP,
    TAG_ROLE,
    TAG_SIMULATED,
    TAG_STAGE,
    TAG_STATUS,
    TAG_TASK,
    TAG_TRIAL_ID,
    client,
    find_runs,
    planned_groups,
    quote,
)

# ------------------------------------------------------------------------------------------ reading runs back


@dataclass
class TrialRun:
    """One trial's child run as MLflow holds it: typed hyperparameters and the last value of each metric."""

    run_id: str
    trial_id: str
    model: str
    task: str
    method: str
    status: str
    config: dict[str, Any]
    metrics: dict[str, float]
    stage: str = "search"
    simulated: bool = False
    chosen_by: str | None = None
    """A seeds stage's run: what chose the configuration it re-runs (``dev`` or ``holdout``)."""
    settings: dict[str, str] = field(default_factory=dict)
    """The run settings its search logged (``setting.<name>`` params), as text."""
    definition: Task | None = field(default=None, repr=False, compare=False)
    """Its task of one's own, as the run describes it (:data:`TAG_TASK`); ``None`` for a shipped task (found by its
    name: :func:`run_task`)."""

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.model, self.task, self.method)


def trial_runs(tracking_uri: str, experiment_name: str, simulated: bool = False) -> list[TrialRun]:
    """Every trial run of a search (MLflow is the source of truth).

    Runs of a rehearsal (``--simulate``) are never mixed with real ones: with ``simulated=False`` an experiment
    holding simulated runs is refused, with ``simulated=True`` one holding real runs is.
    """
    mlflow_client = client(tracking_uri)
    experiment = get_experiment(mlflow_client, tracking_uri, experiment_name)
    found = find_runs(mlflow_client, experiment.experiment_id, **{TAG_ROLE: "trial"})
    _refuse_mixed(found, simulated, tracking_uri, experiment_name)
    return [_trial_run(run) for run in found]


class NoExperiment(ConfigError):
    """The store holds no experiment of that name (a search not run yet): what a seeds stage may go on without."""


def get_experiment(mlflow_client, tracking_uri: str, experiment_name: str):
    experiment = mlflow_client.get_experiment_by_name(experiment_name)
    if experiment is None:
        names = sorted(e.name for e in mlflow_client.search_experiments())
        raise NoExperiment(f"no MLflow experiment named {experiment_name!r} at {tracking_uri}; "
                           f"experiments there: {', '.join(names) or 'none'}")
    return experiment


def _refuse_mixed(found: list, simulated: bool, tracking_uri: str, experiment_name: str) -> None:
    kinds = {run.data.tags.get(TAG_SIMULATED) == "true" for run in found}
    if (not simulated) in kinds:
        what = (("simulated runs (a rehearsal with --simulate)", "pass --simulated to tabulate them") if not simulated
                else ("real runs", "drop --simulated"))
        raise ConfigError(f"experiment {experiment_name!r} at {tracking_uri} holds {what[0]}; they are never mixed "
                          f"into tables of {'real' if not simulated else 'simulated'} runs: {what[1]}")


def task_of(tags: dict[str, str]) -> Task:
    """The task of a run, as its tags name it: a shipped task, or one the run describes (:data:`TAG_TASK`)."""
    described = tags.get(TAG_TASK)
    if described:
        return _described(described)
    return get_task(tags.get("task", ""))


@functools.lru_cache(maxsize=256)
def _described(text: str) -> Task:
    """A run's own word on its task (:func:`istar_tune.tasks.definition.facts`, as JSON), read once per text."""
    values = json.loads(text)
    return get_task(values["name"]) if is_shipped(values["name"]) else task_from_facts(values, source="MLflow")


def run_tasks(runs: Iterable[TrialRun]) -> dict[str, Task]:
    """The tasks of one's own of ``runs`` by name, for :func:`~istar_tune.tasks.get_task`'s ``known``: what a table or
    plot of a search's runs looks a task's name up in (the shipped tasks are known anyway)."""
    return {run.task: run.definition for run in runs if run.definition is not None}


def _trial_run(run) -> TrialRun:
    tags, params = run.data.tags, run.data.params
    # The run's group tags are written when it is created; its params may be missing (a driver killed at that
    # moment, in a store no resumed search repaired): its group comes from the tags, never from defaults.
    named = {k: tags[k] for k in ("model", "task", "method") if tags.get(k) not in (None, "", "None")}
    typed = from_dict(Hyperparameters, {**named, **{k: v for k, v in params.items() if k in HYPERPARAMETER_KEYS}},
                      source=f"run {run.info.run_id}")
    return TrialRun(run_id=run.info.run_id, trial_id=tags.get(TAG_TRIAL_ID, ""), model=typed.model,
                    task=typed.task, method=typed.method, status=tags.get(TAG_STATUS, "unknown"),
                    config={k: getattr(typed, k) for k in params if k in HYPERPARAMETER_KEYS},
                    metrics=dict(run.data.metrics), stage=tags.get(TAG_STAGE, "search"),
                    simulated=tags.get(TAG_SIMULATED) == "true", chosen_by=tags.get(TAG_CHOSEN_BY),
                    settings={k[len(SETTING_PREFIX):]: v for k, v in params.items() if k.startswith(SETTING_PREFIX)},
                    definition=_described(tags[TAG_TASK]) if tags.get(TAG_TASK) else None)


def best_trials(tracking_uri: str, experiment_name: str, simulated: bool = False,
                groups: list[tuple[str, str, str]] | None = None, choose_by: str = "auto",
                metrics: Mapping[str, str] | None = None) -> dict[tuple, TrialRun]:
    """The best finished (or early-stopped) trial per (model, task, method), by the value that chooses
    (:func:`~istar_tune.metrics.choosing`: with held-out data the task metric on the held-out training examples at the
    epoch they chose, else the dev metric at its scored epoch; ``choose_by`` ``dev`` or ``holdout`` reads that one
    alone); ties go to the configuration with fewest epochs, then by its values
    (:func:`~istar_tune.metrics.tie_order`).

    With ``groups``, only those, each read by one query of its runs ordered by the metric (the top
    :data:`BEST_OF_TOP` runs; the whole group when they do not settle it), instead of every run of the experiment:
    a seeds stage after a 19,000-trial grid reads a few hundred runs, not all of them. Groups that no search of the
    experiment planned (its parent runs' plan tags) are not asked for. ``metrics``: each group's task metric by the
    task's name (the caller holds the tasks; a shipped task's is found by its name).
    """
    if groups is None:
        return _best_of(trial_runs(tracking_uri, experiment_name, simulated), choose_by)

    mlflow_client = client(tracking_uri)
    experiment = get_experiment(mlflow_client, tracking_uri, experiment_name)
    held = planned_groups(mlflow_client, experiment.experiment_id)
    best: dict[tuple, TrialRun] = {}
    for model, task, method in groups:
        key = group_key({"model": model, "task": task, "method": method})
        if held is not None and key not in held:
            continue  # no search of this experiment planned the group: no query
        tags = {TAG_ROLE: "trial", TAG_GROUP: key}
        metric = choice_metric((metrics or {}).get(task) or get_task(task).metric, choose_by)
        query = " and ".join(f"tags.`{k}` = {quote(v)}" for k, v in tags.items())
        top = mlflow_client.search_runs([experiment.experiment_id], filter_string=query,
                                        order_by=[f"metrics.`{metric}` DESC"], max_results=BEST_OF_TOP)
        scored = [r for r in top if r.data.tags.get(TAG_STATUS) in COUNTED_STATUSES and metric in r.data.metrics]
        # Runs scored at an epoch their held-out data chose are not in the order of the last epoch's metric.
        by_last = not any(SCORED_PREFIX + metric in r.data.metrics for r in top)
        settled = by_last and scored and (len(top) < BEST_OF_TOP or top[-1].data.metrics.get(metric, -math.inf)
                                          < scored[0].data.metrics[metric])
        found = list(top) if settled else find_runs(mlflow_client, experiment.experiment_id, **tags)
        _refuse_mixed(found, simulated, tracking_uri, experiment_name)
        # Every run found carries the group's tag: one best at most (keyed by the runs' own model name).
        chosen = next(iter(_best_of([_trial_run(r) for r in found], choose_by).values()), None)
        if chosen is not None:
            best[(model, task, method)] = chosen
    return best


BEST_OF_TOP = 50
"""Runs per group :func:`best_trials` reads first, ordered by the metric."""


def run_task(run: TrialRun) -> Task:
    """The task of ``run``, refused in one line for a run of a task neither shipped nor described by the run."""
    if run.definition is not None:
        return run.definition
    if is_shipped(run.task):
        return get_task(run.task)
    raise ConfigError(f"run {run.run_id} is of task {run.task!r}, which is not shipped and which the run does not "
                      f"describe (no tag {TAG_TASK}), so its metric is unknown: run its search again with this "
                      "version, which describes every task of one's own to MLflow")


def _best_of(runs: list[TrialRun], choose_by: str = "auto") -> dict[tuple, TrialRun]:
    by_group: dict[tuple, list[TrialRun]] = {}
    for run in runs:
        if run.status in COUNTED_STATUSES:
            by_group.setdefault(run.group, []).append(run)
    chosen = {group: best_scored(candidates, lambda r: r.config,
                                 lambda r: choosing(r.metrics, run_task(r).metric, choose_by))
              for group, candidates in by_group.items()}
    return {group: run for group, run in chosen.items() if run is not None}


def logged_models(mlflow_client, experiment_id: str) -> dict[str, str]:
    """The experiment's MLflow models (ready ones: an upload that failed leaves a FAILED one) by the run each was logged
    from: source run id → ``models:/<model id>``."""
    found, token = {}, None
    while True:
        page = mlflow_client.search_logged_models(experiment_ids=[experiment_id], page_token=token)
        found.update({m.source_run_id: f"models:/{m.model_id}" for m in page
                      if m.source_run_id and str(getattr(m.status, "value", m.status)) == "READY"})
        token = page.token
        if not token:
            return found
