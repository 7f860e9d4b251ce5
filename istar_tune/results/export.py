"""Best configurations as files: each group's best trial (the tables' rule, :func:`istar_tune.tracking.best_trials`)
in the form ``istar-tune train --config`` reads (its hyperparameters and its search's run settings, one flat
mapping), so the winner can be trained again, or its hyperparameters pasted as a space's constants.

``--output best.yaml`` writes ``best.yaml`` (every group, keyed ``model/task/method``) and, beside it, one file per
group (``best-<model>-<task>-<method>.yaml``), each a ``train --config`` file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from istar_tune import tracking
from istar_tune.config import RunSettings, from_dict, group_key
from istar_tune.errors import ConfigError
from istar_tune.metrics import score
from istar_tune.search.trainable import train_config
from istar_tune.tasks import get_task


def best_configurations(tracking_uri: str, experiment: str, simulated: bool = False, models=None, tasks=None,
                        methods=None) -> dict[str, dict[str, Any]]:
    """``model/task/method`` → the flat configuration of that group's best trial (typed values)."""
    tracking.check_store(tracking_uri)
    chosen = {}
    for (model, task, method), run in sorted(tracking.best_trials(tracking_uri, experiment, simulated).items()):
        if (models and model not in models) or (tasks and task not in tasks) or (methods and method not in methods):
            continue
        settings = dataclasses.asdict(from_dict(RunSettings, run.settings, source=f"run {run.run_id}"))
        metric = get_task(task).metric
        config = train_config(run.config, {k: v for k, v in settings.items() if k in run.settings})
        chosen[group_key(config)] = {"config": config, "trial_id": run.trial_id, "metric": metric,
                                     "score": score(run.metrics, metric)}
    if not chosen:
        raise ConfigError(f"experiment {experiment!r} at {tracking_uri} has no finished trial to export")
    return chosen


def write_best(chosen: dict[str, dict[str, Any]], output: str | Path, experiment: str) -> list[Path]:
    """``output`` with every group, and one ``train --config`` file per group beside it; the paths written."""
    path = Path(output)
    if not path.parent.is_dir():
        raise ConfigError(f"--output {str(output)!r}: the folder {str(path.parent)!r} does not exist; create it or "
                          "write elsewhere")
    written = []
    for key, found in chosen.items():
        single = path.with_name(f"{path.stem}-{key.replace('/', '-')}{path.suffix or '.yaml'}")
        head = (f"# The best configuration of {key} in experiment {experiment} (trial {found['trial_id']}, "
                f"{found['metric']} {found['score']:.4f}).\n"
                f"# Train it again: istar-tune train --config {single.name}\n")
        single.write_text(head + yaml.safe_dump(found["config"], sort_keys=False, allow_unicode=True), "utf-8")
        written.append(single)
    every = {key: found["config"] for key, found in chosen.items()}
    path.write_text(f"# The best configuration of each group of experiment {experiment}, by model/task/method; "
                    "each is also in its own file beside this one.\n"
                    + yaml.safe_dump(every, sort_keys=False, allow_unicode=True), "utf-8")
    return [path, *written]


def export_best(tracking_uri: str, experiment: str, output: str | Path | None, simulated: bool = False, models=None,
                tasks=None, methods=None) -> str:
    """``table --kind best --format yaml``: the files written, as the command reports them."""
    if not output:
        raise ConfigError("--format yaml writes the best configurations to files: give --output FILE.yaml")
    paths = write_best(best_configurations(tracking_uri, experiment, simulated, models, tasks, methods), output,
                       experiment)
    return f"wrote {paths[0]} and {len(paths) - 1} train --config file(s): {', '.join(p.name for p in paths[1:])}"
