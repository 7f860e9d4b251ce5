"""A seeds stage's comparison where MLflow users compare runs: one aggregate run per model × task × method, the parent
of that group's seed runs (MLflow's nested runs: the UI folds the seeds under it), holding the seeds table's numbers
for the task's metric as metrics (``seeds_mean`` — the median where the method's paper reports one —, ``seeds_std``,
``seeds_n``, ``seeds_ci_low``/``seeds_ci_high``: the 95 % Student's t interval of the mean; against Base
``vs_base_difference`` and, for I-STAR, ``vs_base_significant``: one-sided Welch's t-test, Holm over the model's
tasks), the group's configuration as params and the statistics' method as a tag. Written when a seeds stage ends and
by ``table --kind seeds --log``; written again, each aggregate is updated, never duplicated.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.methods import BASELINE, PAPER_METHOD
from istar_tune.results.groups import candidates
from istar_tune.results.seeds import CONFIDENCE, SIGNIFICANCE, seed_rows, seeds_table
from istar_tune.tracking.runs import TrialRun, run_task

AGGREGATE_ROLE = "aggregate"
"""The ``istar_tune.role`` tag of an aggregate run (a trial's is ``trial``, a search's ``search``)."""
TAG_STATISTICS = "istar_tune.statistics"
STATISTICS = (f"centre: the mean over seeds (the median where the method's paper reports one); spread: the sample "
              f"standard deviation (SD, not SEM); interval: {100 * CONFIDENCE:g} % Student's t interval of the mean; "
              f"against Base: one-sided Welch's t-test, Holm-adjusted over the model's tasks, p < {SIGNIFICANCE:g}; "
              "scores in percent")


def log_seed_aggregates(tracking_uri: str, experiment: str, simulated: bool = False,
                        only: set[tuple[str, str, str]] | None = None) -> dict[str, str]:
    """Write (or update) the aggregate run of every group of a seeds stage (of the ``(model, task, method)`` groups
    ``only``, where given: the groups a run of the stage ran; a job array's shards write their own) and nest its seed
    runs under it; the aggregate run's id per ``model/task/method`` written. Base's seeds and the model's other tasks
    count for the comparison either way."""
    runs = [r for r in tracking.trial_runs(tracking_uri, experiment, simulated) if r.stage == "seeds"]
    if not runs:
        raise ConfigError(f"experiment {experiment!r} holds no seed runs: aggregates summarise a seeds stage's seeds "
                          "(e.g. paper_seeds); a search's runs differ in their hyperparameters")
    typed = seeds_table(runs).attrs["typed"]
    client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(client, tracking_uri, experiment).experiment_id
    existing = {run.data.tags.get(tracking.TAG_GROUP): run.info.run_id
                for run in tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: AGGREGATE_ROLE})}
    written = {}
    groups = candidates(runs)
    for (model, task, method), seeds in sorted(groups.items()):
        if only is not None and (model, task, method) not in only:
            continue
        cell = _cell(typed, model, run_task(seeds[0]), method)
        if cell is None:
            continue
        base = _cell(typed, model, run_task(seeds[0]), BASELINE) if method != BASELINE else None
        key = f"{model}/{task}/{method}"
        name = f"{key}: {int(cell['n'])} seeds"
        run_id = existing.get(key)
        if run_id is None:
            run_id = client.create_run(experiment_id, run_name=name, tags={
                tracking.TAG_ROLE: AGGREGATE_ROLE, tracking.TAG_GROUP: key, TAG_STATISTICS: STATISTICS,
                tracking.TAG_STAGE: "seeds"}).info.run_id
        else:
            client.update_run(run_id, status="FINISHED", name=name)
        _write(client, run_id, _metrics(cell, base, method), _configuration(seeds))
        for seed in seeds:
            client.set_tag(seed.run_id, tracking.TAG_PARENT, run_id)
        client.set_terminated(run_id, "FINISHED")
        written[key] = run_id
    every = {**existing, **written}
    _link_comparison(client, experiment_id, [every[key] for key in sorted(every)])
    return written


COMPARISON = "\n\n**The seeds, aggregated**"
"""Where the experiment's description says how to compare the aggregate runs."""


def compare_link(experiment_id: str, run_ids: list[str]) -> str:
    """The MLflow UI's page comparing these runs side by side (their metrics, params and tags)."""
    from urllib.parse import quote

    return (f"#/compare-runs?runs={quote(json.dumps(run_ids, separators=(',', ':')))}"
            f"&experiments={quote(json.dumps([experiment_id], separators=(',', ':')))}&{tracking.MODEL_TRAINING}")


def _link_comparison(client, experiment_id: str, run_ids: list[str]) -> None:
    """The experiment's description (the first thing its page shows) ends with a link comparing the aggregates."""
    note = client.get_experiment(experiment_id).tags.get(tracking.NOTE_TAG, "").split(COMPARISON)[0]
    client.set_experiment_tag(experiment_id, tracking.NOTE_TAG, (
        f"{note}{COMPARISON}: [the {len(run_ids)} groups side by side]({compare_link(experiment_id, run_ids)}) (one "
        "run per model × task × method, its seed runs nested under it: mean, SD, n, 95 % t-interval and the "
        "comparison with Base as metrics)."))


def _cell(typed, model: str, task, method: str) -> dict[str, Any] | None:
    """The seeds table's typed row of a group's main row (a two-stage method's second stage) and the task's metric."""
    row = seed_rows([method])[-1][0]
    found = typed[(typed.model == model) & (typed.task == task.name) & (typed.method == row)
                  & (typed.metric == task.metric_text) & (typed.n > 0)]
    return None if found.empty else found.iloc[0].to_dict()


def _metrics(cell: dict[str, Any], base: dict[str, Any] | None, method: str) -> dict[str, float]:
    mean, std, n, low, high, difference, significant = tracking.SEED_AGGREGATES
    values = {mean: cell["value"], std: cell["std"], n: cell["n"], low: cell["ci_low"], high: cell["ci_high"]}
    if base is not None:
        values[difference] = cell["value"] - base["value"]
        if method == PAPER_METHOD:
            values[significant] = float(bool(cell["significant"]))
    return {k: float(v) for k, v in values.items() if pd.notna(v)}


def _configuration(seeds: list[TrialRun]) -> dict[str, str]:
    """What the group's seed runs share (every hyperparameter but the seed)."""
    shared = {k: v for k, v in seeds[0].config.items() if k != "seed"
              and all(s.config.get(k) == v for s in seeds)}
    return {k: str(v) for k, v in shared.items()}


def _write(client, run_id: str, metrics: dict[str, float], params: dict[str, str]) -> None:
    from mlflow.entities import Metric, Param

    held = client.get_run(run_id).data.params
    stamp = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, stamp, 0) for k, v in metrics.items()],
                     params=[Param(k, v) for k, v in params.items() if k not in held])
