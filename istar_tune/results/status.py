"""``istar-tune status``: how a search stands, from MLflow alone (it may run in another terminal or on a cluster).

Per (model, task, method) group: trials running, pending (planned and not started), finished, stopped early,
failed and interrupted, and the best value of the task's metric so far.
"""

from __future__ import annotations

import json

import pandas as pd

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.metrics import score
from istar_tune.tasks import get_task


def search_status(tracking_uri: str, experiment: str) -> tuple[pd.DataFrame, str]:
    """The per-group table and a one-line headline (the search's own state and totals)."""
    tracking.check_store(tracking_uri)
    client = tracking.client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise ConfigError(f"no MLflow experiment named {experiment!r} at {tracking_uri}; experiments there: "
                          f"{', '.join(names) or 'none'}")
    parents = tracking.find_runs(client, found.experiment_id, **{tracking.TAG_ROLE: "search"})
    plan = json.loads(parents[0].data.tags.get(tracking.TAG_PLAN, "{}")) if parents else {}
    groups: dict[str, dict] = {}
    for key, planned in plan.items():
        if key != tracking.PLAN_TOTAL:  # a plan too large for a tag keeps only its total
            groups[key] = {"planned": planned}
    for run in tracking.find_runs(client, found.experiment_id, **{tracking.TAG_ROLE: "trial"}):
        tags = run.data.tags
        key = tags.get(tracking.TAG_GROUP, "?")
        row = groups.setdefault(key, {"planned": 0})
        status = tags.get(tracking.TAG_STATUS, "running")
        row[status] = row.get(status, 0) + 1
        try:
            metric = get_task(tags.get("task", "")).metric
        except ConfigError:
            continue
        value = score(run.data.metrics, metric)
        if value is not None and status != "failed" and value > row.get("best", float("-inf")):
            row["best"], row["metric"] = value, metric
    rows = []
    for key, row in sorted(groups.items()):
        counts = {s: row.get(s, 0) for s in tracking.STATUSES}
        started = sum(counts.values())
        pending = max(row["planned"] - started, 0) if key in plan else 0
        rows.append({"group": key, **counts, "pending": pending, "metric": row.get("metric", ""),
                     "best so far": row.get("best")})
    table = pd.DataFrame(rows, columns=["group", "running", "pending", "finished", "stopped_early", "failed",
                                        "interrupted", "metric", "best so far"])
    state = parents[0].info.status if parents else "unknown"
    started = int(table[list(tracking.STATUSES)].to_numpy().sum()) if len(table) else 0
    done = int(table[["finished", "stopped_early", "failed"]].to_numpy().sum()) if len(table) else 0
    total = f"{sum(plan.values())}" if plan else f"{started} started (plan not recorded)"
    headline = f"search {experiment}: {state}; {done} of {total} trials ended, {int(table.running.sum())} running"
    return table, headline
