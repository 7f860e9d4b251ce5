"""A finished grid as a public learning-curve benchmark (``istar-tune export``): every configuration's record after
each epoch, read from MLflow, as

* ``curves``: one long table (parquet, or csv by the file's suffix): a row per model × task × method ×
  configuration × epoch, the configuration's hyperparameters as columns and the objectives of :data:`OBJECTIVES`;
  what mfpbench's generic tabular benchmark and pandas read;
* ``synetune``: Syne Tune's blackbox repository files (its own ``BlackboxTabular`` and ``serialize``;
  :data:`SYNETUNE_INSTALL`), one blackbox per model × method in a folder of its own, the tasks its tasks, ``epochs`` a
  hyperparameter and the fidelity the epoch (a configuration's objectives past its own epochs are NaN), the
  metadata the model, the run settings (precision and speed settings among them), the tool's version and the data's
  fingerprints (the MLflow datasets' digests the runs trained and were scored on).

Only a complete grid is exported (:func:`~istar_tune.replay.reading.grid_runs`): what a scheduler stopped early has no
whole curve.
"""

from __future__ import annotations

import math
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from istar_tune import tracking
from istar_tune.errors import ConfigError
from istar_tune.metrics import HOLDOUT_PREFIX, tie_order
from istar_tune.replay.reading import grid_runs

OBJECTIVES = ("dev_score", "held_out_score", "train_loss", "eval_isoscore_star", "elapsed_s")
"""Each epoch's objectives: the task metric on the dev set, on the held-out share (NaN without one), the training
loss, eval IsoScore* and the seconds the configuration's trial had trained by then (its epochs' measured times)."""
FORMATS = ("curves", "synetune")
AXES = ("model", "task", "method")
SYNETUNE_INSTALL = 'pip install "syne-tune>=0.16" fastparquet huggingface_hub'
"""Everything the blackbox files and Syne Tune's loader need in a fresh environment: syne-tune's blackbox repository
imports huggingface_hub, which syne-tune does not declare (tried in a fresh venv with syne-tune 0.16.0)."""


def export_grid(tracking_uri: str, experiment: str, fmt: str, output: str | Path, simulated: bool = False) -> str:
    """``istar-tune export``: the grid ``experiment`` written as ``fmt`` (:data:`FORMATS`) to ``output``; what was
    written, in one line."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose {' or '.join(FORMATS)}")
    runs = grid_runs(tracking_uri, experiment, simulated)
    client = tracking.client(tracking_uri)
    table = grid_curves(runs, client)
    shape = (f"{table.groupby([*AXES, 'configuration']).ngroups} configurations, {len(table)} epochs, "
             f"{table.task.nunique()} task(s)")
    if fmt == "curves":
        return f"wrote {write_curves(table, output)}: {shape}"
    folders = write_synetune(table, output, grid_metadata(runs, client, experiment))
    return f"wrote {len(folders)} Syne Tune blackbox(es) ({', '.join(f.name for f in folders)}) in {output}: {shape}"


def grid_curves(runs: list, client) -> pd.DataFrame:
    """The long table of a finished grid's runs (:func:`~istar_tune.replay.reading.grid_runs`), configurations in
    the tables' tie order, numbered from 0 within each model × method (the same number on every task)."""
    keys = sorted({key for run in runs for key in run.config} - set(AXES))
    numbers = _configuration_numbers(runs, keys)
    rows = []
    for run in runs:
        metric = tracking.run_task(run).metric
        series = {name: dict((m.step, m.value) for m in client.get_metric_history(run.run_id, source))
                  for name, source in (("dev_score", metric), ("held_out_score", HOLDOUT_PREFIX + metric),
                                       ("train_loss", "train_loss"), ("eval_isoscore_star", "eval_isoscore_star"),
                                       ("epoch_time_s", "epoch_time_s"))}
        elapsed = 0.0
        for epoch in sorted(series["dev_score"]):
            elapsed += series["epoch_time_s"].get(epoch, math.nan)
            rows.append({"model": run.model, "task": run.task, "method": run.method,
                         "configuration": numbers[(run.model, run.method, _values(run.config, keys))],
                         **{key: run.config.get(key) for key in keys}, "epoch": epoch, "metric": metric,
                         **{name: series[name].get(epoch, math.nan) for name in OBJECTIVES[:-1]},
                         "elapsed_s": elapsed, "status": run.status})
    columns = [*AXES, "configuration", *keys, "epoch", "metric", *OBJECTIVES, "status"]
    return pd.DataFrame(rows, columns=columns).sort_values([*AXES, "configuration", "epoch"], ignore_index=True)


def grid_metadata(runs: list, client, experiment: str) -> dict[str, Any]:
    """What a benchmark's reader needs to know of where its numbers come from: the tool and its version, the
    experiment, the run settings (precision and speed settings among them) and each data set's fingerprints (the
    digests of the MLflow datasets its runs trained and were scored on)."""
    digests: dict[str, set[str]] = {}
    for run in runs:
        for found in client.get_run(run.run_id).inputs.dataset_inputs:
            digests.setdefault(found.dataset.name, set()).add(found.dataset.digest)
    settings = sorted({tuple(sorted(r.settings.items())) for r in runs})
    return {"tool": "istar-tune", "version": version("istar-tune"), "experiment": experiment,
            "settings": [dict(s) for s in settings], "data_fingerprints": {k: sorted(v) for k, v in digests.items()}}


def _values(config: dict[str, Any], keys: list[str]) -> tuple:
    return tuple(repr(config.get(key)) for key in keys)


def _configuration_numbers(runs: list, keys: list[str]) -> dict[tuple, int]:
    """(model, method, the hyperparameters' values) → its number, in the tables' tie order."""
    numbers: dict[tuple, int] = {}
    for model, method in sorted({(r.model, r.method) for r in runs}):
        configs = {_values(r.config, keys): r.config for r in runs if (r.model, r.method) == (model, method)}
        ordered = sorted(configs, key=lambda values: tie_order({**configs[values], "method": method}))
        numbers.update({(model, method, values): number for number, values in enumerate(ordered)})
    return numbers


def write_curves(table: pd.DataFrame, output: str | Path) -> Path:
    """The long table as parquet (``.parquet``) or csv (``.csv``)."""
    path = Path(output)
    if path.suffix not in (".parquet", ".csv"):
        raise ConfigError(f"--output {str(output)!r}: --format curves writes a .parquet or a .csv file; name one")
    if not path.parent.is_dir():
        raise ConfigError(f"--output {str(output)!r}: the folder {str(path.parent)!r} does not exist; create it")
    if path.suffix == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    return path


def synetune_blackboxes(table: pd.DataFrame, metadata: dict[str, Any]) -> dict[str, tuple[dict, dict]]:
    """``model-method`` → (task → its ``BlackboxTabular``, the blackbox's metadata) over the long table; refused
    where one model × method's tasks did not run the same configurations (a blackbox's tasks share them)."""
    try:
        from syne_tune.blackbox_repository.blackbox_tabular import BlackboxTabular
        from syne_tune.config_space import choice, randint
    except ImportError as error:
        raise ConfigError(f"--format synetune writes Syne Tune's own files and needs it: {SYNETUNE_INSTALL} "
                          f"({error})") from None
    found = {}
    for (model, method), rows in table.groupby(["model", "method"], sort=True):
        keys = [k for k in rows.columns[len(AXES) + 1:rows.columns.get_loc("epoch")] if rows[k].notna().any()]
        configs = rows.drop_duplicates("configuration").sort_values("configuration")[keys].reset_index(drop=True)
        horizon = int(rows.epoch.max())
        space = {key: choice(sorted(configs[key].unique().tolist())) for key in keys}
        boxes = {}
        for task, cells in rows.groupby("task", sort=True):
            if sorted(cells.configuration.unique()) != list(range(len(configs))):
                raise ConfigError(f"{model} × {method}: task {task} ran {cells.configuration.nunique()} of the "
                                  f"{len(configs)} configurations its other tasks ran; a Syne Tune blackbox's tasks "
                                  "share their configurations: export the tasks that ran the same grid")
            values = np.full((len(configs), 1, horizon, len(OBJECTIVES)), np.nan)
            for row in cells.itertuples(index=False):
                values[row.configuration, 0, row.epoch - 1] = [getattr(row, name) for name in OBJECTIVES]
            boxes[task] = BlackboxTabular(hyperparameters=configs, configuration_space=space,
                                          fidelity_space={"epoch": randint(1, horizon)},
                                          objectives_evaluations=values, objectives_names=list(OBJECTIVES),
                                          fidelity_values=np.arange(1, horizon + 1))
        metrics = dict(rows[["task", "metric"]].drop_duplicates().itertuples(index=False))
        found[f"{model}-{method}".replace("/", "_")] = (boxes, {**metadata, "model": model, "method": method,
                                                                "metrics": metrics})
    return found


def write_synetune(table: pd.DataFrame, output: str | Path, metadata: dict[str, Any]) -> list[Path]:
    """Each model × method's blackbox serialised by Syne Tune into ``output/<model>-<method>``; the folders."""
    from syne_tune.blackbox_repository.blackbox_tabular import serialize

    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--output {str(output)!r} is a file: --format synetune writes a folder of blackboxes")
    written = []
    for name, (boxes, meta) in synetune_blackboxes(table, metadata).items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        serialize(boxes, str(folder / name), metadata=meta)
        written.append(folder / name)
    return written
