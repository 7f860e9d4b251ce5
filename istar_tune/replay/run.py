"""``istar-tune replay``: a finished grid's curves read from MLflow, every strategy replayed on them, the table
written (md, csv or parquet, like ``table``) and logged to the search's own MLflow run with its recommendation."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.replay.fragment import advised_fragment
from istar_tune.replay.reading import read_grid
from istar_tune.replay.summary import (
    TARGET,
    advice,
    conformal_bounds,
    recommendation,
    replay_table,
    strategy_names,
)
from istar_tune.results.formats import render

CAPTION = ("Each search strategy replayed on the grid's recorded curves (no training): `chose_best`, the share of "
           "replays that chose the grid's best configuration; `within_noise`, the share within the seed noise of its "
           "score (a seeds stage's standard deviation; empty when no seeds stage re-ran the grid); regrets on the "
           "selection metric (`dev_regret`: on the dev set, when held-out data chose); `epochs_share` and "
           "`gpu_hours_share`, its cost as a share of the group's grid (`grid_epochs`; GPU-hours from the cost "
           "model). The recommendation's share of the grid's epochs pools the groups: its epochs over theirs.")
REPLAY_TABLE_ARTIFACT = "replay"
STRATEGY_FILE = "strategy.yaml"
"""The recommended strategy as a search-space fragment, beside the table (``search --strategy-from FILE``)."""


@dataclass
class Replay:
    """A replay's table, its recommendation line, the strategy it recommends as a search-space fragment (``None``:
    undecided), and how long it took (reading included)."""

    table: pd.DataFrame
    recommendation: str
    seconds: float
    strategy: dict | None = None
    bounds: list[str] = field(default_factory=list)
    """Each group's conformal early-stopping rule fitted on the grid, and its guarantee (one line each)."""


def replay_experiment(tracking_uri: str, experiment: str, replays: int = 50, workers: int = 4, seed: int = 0,
                      across_methods: bool = False, simulated: bool = False, noise_from: str | None = None,
                      schedulers: tuple[str, ...] | None = None, log_to_mlflow: bool = True,
                      progress: Callable[[str], None] | None = None, processes: int | None = None) -> Replay:
    """Replay every default strategy (:func:`istar_tune.replay.summary.settings_for`) ``replays`` times on each
    unit of the grid ``experiment``, and log the table and recommendation to its search run (unless told not to).
    ``processes``: as :func:`~istar_tune.replay.summary.replay_table`'s."""
    unknown = sorted(set(schedulers or ()) - set(strategy_names()))
    if unknown:
        raise ConfigError(f"replay: unknown scheduler {', '.join(unknown)}: choose from "
                          f"{', '.join(strategy_names())}")
    if replays < 1 or workers < 1 or (processes is not None and processes < 1):
        raise ConfigError(f"replay: --replays, --workers and --processes must be at least 1, got {replays}, "
                          f"{workers} and {processes}")
    began = time.monotonic()
    units = read_grid(tracking_uri, experiment, simulated, across_methods, noise_from)
    if progress:
        progress(f"read {sum(len(u.curves) for u in units)} configurations in {len(units)} groups in "
                 f"{time.monotonic() - began:.1f} s")
    table = replay_table(units, replays, workers, seed, schedulers, progress, processes)
    result = Replay(table, recommendation(table), time.monotonic() - began, advised_fragment(advice(table)),
                    conformal_bounds(units))
    if log_to_mlflow:
        _log(tracking_uri, experiment, result)
    return result


def _log(tracking_uri: str, experiment: str, result: Replay) -> None:
    client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(client, tracking_uri, experiment).experiment_id
    parents = tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})
    with tempfile.TemporaryDirectory() as folder:
        for fmt in ("md", "csv"):
            path = Path(folder) / f"replay.{fmt}"
            render(result.table, fmt, path, caption=CAPTION)
            if fmt == "md" and result.bounds:
                path.write_text(path.read_text() + "\n" + "\n\n".join(result.bounds) + "\n")
            for parent in parents[:1]:
                client.log_artifact(parent.info.run_id, str(path), artifact_path=REPLAY_TABLE_ARTIFACT)
        if result.strategy is not None:
            path = Path(folder) / STRATEGY_FILE
            path.write_text(yaml.safe_dump(result.strategy, sort_keys=False))
            for parent in parents[:1]:
                client.log_artifact(parent.info.run_id, str(path), artifact_path=REPLAY_TABLE_ARTIFACT)
    for parent in parents[:1]:
        client.set_tag(parent.info.run_id, tracking.TAG_REPLAY, result.recommendation[:tracking.MAX_TAG_CHARS])
        client.set_tag(parent.info.run_id, tracking.TAG_STRATEGY, json.dumps(result.strategy))


__all__ = ["CAPTION", "Replay", "TARGET", "replay_experiment"]
