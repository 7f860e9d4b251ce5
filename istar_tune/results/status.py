"""``istar-tune status``: how a search stands, from MLflow alone (it may run in another terminal or on a cluster).

Per (model, task, method) group: trials running, pending (planned and not started), finished, stopped early,
failed and interrupted, and the best value of the task's metric so far.
"""

from __future__ import annotations

import json

import pandas as pd

from istar_tune import tracking
from istar_tune.console import say
from istar_tune.errors import ConfigError
from istar_tune.markdown import markdown
from istar_tune.metrics import best_scored, choosing_score, chosen_on
from istar_tune.trial_status import TrialStatus

COLUMNS = (TrialStatus.RUNNING, TrialStatus.PENDING, TrialStatus.FINISHED, TrialStatus.STOPPED_EARLY,
           TrialStatus.FAILED, TrialStatus.INTERRUPTED)
"""The status table's counts, in its column order."""


def search_status(tracking_uri: str, experiment: str) -> tuple[pd.DataFrame, str]:
    """The per-group table and a one-line headline (the search's own state and totals)."""
    tracking.check_store(tracking_uri)
    client = tracking.client(tracking_uri)
    found = tracking.get_experiment(client, tracking_uri, experiment)
    parents = tracking.find_runs(client, found.experiment_id, **{tracking.TAG_ROLE: "search"})
    plan = _plan(parents)
    # A plan too large for a tag keeps only its total (the key PLAN_TOTAL): no group has a planned count then.
    groups = {key: {"planned": planned} for key, planned in plan.items() if key != tracking.PLAN_TOTAL}
    runs: dict[str, list] = {}
    for run in tracking.find_runs(client, found.experiment_id, **{tracking.TAG_ROLE: "trial"}):
        key = run.data.tags.get(tracking.TAG_GROUP, "?")
        row = groups.setdefault(key, {"planned": 0})
        status = run.data.tags.get(tracking.TAG_STATUS, TrialStatus.RUNNING)
        row[status] = row.get(status, 0) + 1
        runs.setdefault(key, []).append(run)
    rows = []
    for key, row in sorted(groups.items()):
        counts = {s: row.get(s, 0) for s in tracking.STATUSES}
        pending = max(row["planned"] - sum(counts.values()), 0) if key in plan else 0
        metric, best = _best_so_far(runs.get(key, []))
        rows.append({"group": key, **counts, TrialStatus.PENDING.value: pending, "metric": metric, "best so far": best})
    table = pd.DataFrame(rows, columns=["group", *(status.value for status in COLUMNS), "metric", "best so far"])
    states = sorted({parent.info.status for parent in parents})
    state = "RUNNING" if "RUNNING" in states else ", ".join(states) or "unknown"
    started = int(table[list(tracking.STATUSES)].to_numpy().sum()) if len(table) else 0
    ended = [TrialStatus.FINISHED.value, TrialStatus.STOPPED_EARLY.value, TrialStatus.FAILED.value]
    done = int(table[ended].to_numpy().sum()) if len(table) else 0
    total = f"{sum(plan.values())}" if plan else f"{started} started (plan not recorded)"
    shards = len({parent.data.tags[tracking.TAG_SHARD] for parent in parents if tracking.TAG_SHARD in parent.data.tags})
    named = f"search {experiment}" + (f" ({shards} shards)" if shards else "")
    headline = f"{named}: {state}; {done} of {total} trials ended, {int(table.running.sum())} running"
    table.attrs["ended"] = bool(parents) and not {"RUNNING", "SCHEDULED"} & set(states)
    return table, headline


def _plan(parents: list) -> dict[str, int]:
    """The trials planned per group by every search run of the experiment (a job array's shards: one each)."""
    plan: dict[str, int] = {}
    for parent in parents:
        tag = parent.data.tags.get(tracking.TAG_PLAN)
        for key, planned in (json.loads(tag) if tag else {}).items():
            plan[key] = plan.get(key, 0) + planned if key == tracking.PLAN_TOTAL else planned
    return plan


def watch_status(tracking_uri: str, experiment: str, every_s: float = 0, redraw: bool = False, write=None,
                 sleep=None) -> None:
    """Print the status once, or (``every_s``) again every so many seconds until the search has ended; ``redraw``
    (a terminal) clears the screen first, so the table stays in place."""
    import time

    if every_s < 0:
        raise ConfigError(f"--watch {every_s:g}: give the seconds between refreshes (more than 0), or leave it out")
    write = write or say
    while True:
        table, headline = search_status(tracking_uri, experiment)
        write(("\033[H\033[2J" if redraw and every_s else "") + headline + "\n" + markdown(table))
        if not every_s or table.attrs.get("ended"):
            return
        (sleep or time.sleep)(every_s)


def _best_so_far(runs: list) -> tuple[str, float | None]:
    """The group's task metric and its best value so far among trials that have not failed (running ones
    included: their latest epoch), by :func:`istar_tune.metrics.best_scored` on the value that chooses
    (:func:`istar_tune.metrics.choosing_score`: ``held-out <metric>`` where the trials hold data out)."""
    metric = ""
    for run in runs:
        try:
            metric = tracking.task_of(run.data.tags).metric
            break
        except ConfigError:
            continue
    if not metric:
        return "", None

    def value(run) -> float | None:
        if run.data.tags.get(tracking.TAG_STATUS) == TrialStatus.FAILED:
            return None
        return choosing_score(run.data.metrics, metric)

    best = best_scored(runs, lambda r: r.data.params, value)
    if best is None:
        return "", None
    # With held-out data the held-out value chooses (the objective Tune sees), and the column says so.
    held = chosen_on(best.data.metrics, metric) == "holdout"
    return (f"held-out {metric}" if held else metric), value(best)
