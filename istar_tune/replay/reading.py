"""A finished grid read back from MLflow as :class:`~istar_tune.replay.curves.Unit` s: every configuration's curve
(its per-epoch records), the epochs the grid trained, and the seed noise of its choice when a seeds stage re-ran it.
Anything short of a complete grid is refused in one line naming what is missing."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.metrics import HOLDOUT_PREFIX, choice_metric, score, tie_order
from istar_tune.replay.curves import Curve, Unit
from istar_tune.search.spaces.cost import epoch_seconds

History = Callable[[str, str], list[tuple[int, float]]]
"""(run id, metric) → its (epoch, value) records."""
ALL_METHODS = "all"
SHOWN = 3
"""Missing configurations named in a refusal (then a count)."""


def read_grid(tracking_uri: str, experiment: str, simulated: bool = False, across_methods: bool = False,
              noise_from: str | None = None) -> list[Unit]:
    """The curves of a finished grid search, one unit per model × task × method (per model × task with
    ``across_methods``). Refused: a seeds stage, a search that sampled or stopped trials early, a configuration
    planned but missing or unfinished, a curve whose epochs are not 1..its epochs."""
    runs = grid_runs(tracking_uri, experiment, simulated)
    client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(client, tracking_uri, experiment).experiment_id
    raw = {r.info.run_id: r for r in tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "trial"})}
    holdout = held_out(runs)

    def history(run_id: str, metric: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in client.get_metric_history(run_id, metric)]

    noise = seed_noise(tracking_uri, experiment, "holdout" if holdout else "dev", noise_from, simulated)
    by_group: dict[tuple, list] = {}
    for run in runs:
        unit = (run.model, run.task, ALL_METHODS if across_methods else run.method)
        by_group.setdefault(unit, []).append(run)
    units = []
    for (model, task, method), members in sorted(by_group.items()):
        members.sort(key=lambda r: tie_order({**r.config, "method": r.method}))  # replays independent of MLflow
        curves = [curve_of(run, history, holdout) for run in members]
        # A shared trial's configurations cost its longest one's epochs; a fused trial's members each their own (a
        # shared member's configurations, ``<trial>-m<i>-e<k>``, its longest one's).
        trainer = {r.run_id: re.sub(r"-e\d+$", "", r.trial_id) if r.settings.get("fused") == "yes" else
                   raw[r.run_id].data.tags.get(tracking.TAG_TRAINED_BY) or r.trial_id for r in members}
        trained: dict[str, int] = {}
        for run, curve in zip(members, curves):
            trained[trainer[run.run_id]] = max(trained.get(trainer[run.run_id], 0), curve.trained_epochs)
        seconds = {trainer[r.run_id]: c.epoch_seconds for r, c in zip(members, curves)}
        found = Unit(model, task, method, curves, grid_epochs=sum(trained.values()),
                     grid_seconds=sum(epochs * seconds[t] for t, epochs in trained.items()))
        if found.best is not None:
            found.noise = noise.get((model, task, found.curves[found.best[0]].config.get("method", method)))
        units.append(found)
    return units


def grid_runs(tracking_uri: str, experiment: str, simulated: bool = False) -> list:
    """The trial runs of a finished grid search (:class:`~istar_tune.tracking.runs.TrialRun`), each configuration's
    whole curve in MLflow; anything short of that refused in one line (what :func:`read_grid` and the grid's export
    read)."""
    tracking.check_store(tracking_uri)
    client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(client, tracking_uri, experiment).experiment_id
    plan = _grid_plan(client, experiment_id, experiment)
    runs = tracking.trial_runs(tracking_uri, experiment, simulated)
    if any(_set(r.settings.get("patience")) for r in runs):
        raise ConfigError(f"experiment {experiment!r} is not a complete grid: its trials stop early (patience "
                          "stops a trial after epochs without a better held-out metric), so not every configuration "
                          "has its whole curve; use a grid run without patience")
    _check_complete(runs, plan, experiment)
    return runs


def held_out(runs: list) -> bool:
    """Whether the runs held data out to choose (their scheduler then saw the held-out metric)."""
    return any(_set(r.settings.get("holdout")) for r in runs)


def _grid_plan(client, experiment_id: str, experiment: str) -> dict[str, int] | None:
    parents = tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})
    if not parents:
        raise ConfigError(f"experiment {experiment!r} has no search run: replay reads a finished grid search")
    plan: dict[str, int] | None = {}
    for parent in parents:
        params = parent.data.params
        if params.get("stage") == "seeds":
            raise ConfigError(f"experiment {experiment!r} is a seeds stage, not a grid: replay the grid it chose "
                              f"from ({params.get('best_of', '?')})")
        if params.get("algorithm", "grid") != "grid" or params.get("scheduler", "none") not in ("none", "fifo"):
            raise ConfigError(f"experiment {experiment!r} is not a complete grid: its search ran algorithm "
                              f"{params.get('algorithm')} with scheduler {params.get('scheduler')}, so not every "
                              "configuration has its whole curve; replay a search with search.algorithm: grid and "
                              "no scheduler")
        decoded = tracking.decode_plan(parent.data.tags.get(tracking.TAG_PLAN))
        plan = None if decoded is None or plan is None else {**plan, **decoded}
    return plan


def _check_complete(runs: list, plan: dict[str, int] | None, experiment: str) -> None:
    """Refuse a grid with a configuration missing or not ended (finished, or failed: a NaN trial)."""
    unfinished = [r for r in runs if r.status not in ("finished", "failed")]
    if unfinished:
        shown = ", ".join(f"{r.method} {_point(r.config)} ({r.status})" for r in unfinished[:SHOWN])
        more = f" and {len(unfinished) - SHOWN} more" if len(unfinished) > SHOWN else ""
        raise ConfigError(f"experiment {experiment!r} is not a complete grid: {len(unfinished)} configuration(s) "
                          f"did not finish: {shown}{more}; resume the search (istar-tune search ... --resume), "
                          "then replay it")
    counts: dict[str, int] = {}
    for run in runs:
        key = f"{run.model}/{run.task}/{run.method}"
        counts[key] = counts.get(key, 0) + 1
    short = {key: (planned, counts.get(key, 0)) for key, planned in (plan or {}).items()
             if counts.get(key, 0) < planned}
    if short:
        shown = "; ".join(f"{key}: {found} of {planned} configurations" for key, (planned, found) in
                          sorted(short.items())[:SHOWN])
        raise ConfigError(f"experiment {experiment!r} is not a complete grid: {shown}"
                          f"{' and more' if len(short) > SHOWN else ''} have runs in MLflow; run the search to "
                          "its end (--resume), then replay it")
    if not runs:
        raise ConfigError(f"experiment {experiment!r} holds no trial run to replay")


def _set(value: str | None) -> bool:
    return value not in (None, "", "None")


def _point(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(config.items())
                    if k not in ("model", "task", "method"))


def curve_of(run, history: History, holdout: bool) -> Curve:
    """A run's curve: after each epoch, the score a scheduler saw (the task metric, or with held-out data the best
    held-out metric so far) and, with held-out data, the dev metric at the epoch that best one came from."""
    task = tracking.run_task(run)  # a task of one's own as its run describes it: no registry is asked
    metric = task.metric
    epochs = int(run.config["epochs"])
    dev = _aligned(run, history(run.run_id, metric), epochs, metric)
    config = {**run.config, "method": run.method}
    if not task.train_examples:
        raise ConfigError(f"run {run.run_id} of task {task.name!r} does not record its example counts, which the "
                          "replay's cost model needs: run its search again with this version (its runs record them)")
    cost = epoch_seconds({**config, "model": run.model, "task": run.task}, **_shrinkage(run.settings), task=task)
    failed = run.status == "failed"
    if not holdout:
        return Curve(config, tuple(dev), failed=failed, epoch_seconds=cost)
    held = _aligned(run, history(run.run_id, HOLDOUT_PREFIX + metric), epochs, HOLDOUT_PREFIX + metric)
    values, devs, best = [], [], (0, -math.inf)
    for epoch, value in enumerate(held[:len(dev)], start=1):
        if value > best[1]:  # the first epoch that reached the best (training/selection.py)
            best = (epoch, value)
        values.append(best[1] if best[0] else math.nan)
        devs.append(dev[best[0] - 1] if best[0] else math.nan)
    return Curve(config, tuple(values), tuple(devs), failed=failed, epoch_seconds=cost)


def _aligned(run, records: list[tuple[int, float]], epochs: int, metric: str) -> list[float]:
    steps = [step for step, _ in records]
    complete = run.status == "failed" or len(steps) == epochs
    if steps != list(range(1, len(steps) + 1)) or not complete or len(steps) > epochs:
        raise ConfigError(f"run {run.run_id} ({run.method} {_point(run.config)}) holds {metric} for epochs "
                          f"{steps or 'none'} of {epochs}: the grid's curves are not aligned; a run must record "
                          "every epoch 1..its epochs")
    return [value for _, value in records]


def _shrinkage(settings: dict[str, str]) -> dict[str, int]:
    value = settings.get("shrinkage_tokens")
    return {"shrinkage_tokens": int(float(value))} if _set(value) else {}


def seed_noise(tracking_uri: str, experiment: str, choose_by: str, noise_from: str | None = None,
               simulated: bool = False) -> dict[tuple, float]:
    """(model, task, method) → the sample standard deviation of the score (on the grid's selection metric) over the
    runs of a seeds stage that re-ran the grid's choice: the stage ``noise_from``, else one in the same store whose
    ``best_of`` names ``experiment``. Empty when there is none (the noise is then unknown)."""
    client = tracking.client(tracking_uri)
    names = [noise_from] if noise_from else [e.name for e in client.search_experiments()]
    for name in names:
        found = client.get_experiment_by_name(name)
        parents = tracking.find_runs(client, found.experiment_id, **{tracking.TAG_ROLE: "search"}) if found else []
        if not any(p.data.params.get("stage") == "seeds" and experiment in p.data.params.get("best_of", "").split(",")
                   for p in parents):
            if noise_from:
                raise ConfigError(f"--noise-from {noise_from!r} is not a seeds stage of {experiment!r}")
            continue
        scores: dict[tuple, list[float]] = {}
        for run in tracking.trial_runs(tracking_uri, name, simulated):
            value = score(run.metrics, choice_metric(tracking.run_task(run).metric, choose_by))
            if run.status in tracking.COUNTED_STATUSES and value is not None and not math.isnan(value):
                scores.setdefault(run.group, []).append(value)
        return {group: float(np.std(values, ddof=1)) for group, values in scores.items() if len(values) > 1}
    return {}
