"""Best configurations as files: each group's best trial (the tables' rule, :func:`istar_tune.tracking.best_trials`)
in the form ``istar-tune train --config`` reads (its hyperparameters and its search's run settings, one flat
mapping), so the winner can be trained again, or its hyperparameters pasted as a space's constants.

``--output best.yaml`` writes ``best.yaml`` (every group, keyed ``model/task/method``) and, beside it, one file per
group (``best-<model>-<task>-<method>.yaml``), each a ``train --config`` file. A task that is not shipped is written
beside them too, as its search resolved it (``task-<name>.yaml``: its files and their checksums), and the
configurations name that file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from istar_tune import tracking
from istar_tune.config import RunSettings, from_dict, group_key
from istar_tune.errors import ConfigError
from istar_tune.metrics import choosing_score, chosen_on, score
from istar_tune.tasks import is_shipped


def best_configurations(tracking_uri: str, experiment: str, simulated: bool = False, models=None, tasks=None,
                        methods=None) -> dict[str, dict[str, Any]]:
    """``model/task/method`` → the flat configuration of that group's best trial (typed values)."""
    tracking.check_store(tracking_uri)
    mlflow_client = tracking.client(tracking_uri)
    logged = tracking.logged_models(mlflow_client, tracking.get_experiment(mlflow_client, tracking_uri,
                                                                           experiment).experiment_id)
    chosen = {}
    for (model, task, method), run in sorted(tracking.best_trials(tracking_uri, experiment, simulated).items()):
        if (models and model not in models) or (tasks and task not in tasks) or (methods and method not in methods):
            continue
        settings = dataclasses.asdict(from_dict(RunSettings, run.settings, source=f"run {run.run_id}"))
        metric = tracking.run_task(run).metric
        config = tracking.train_config(run.config, {k: v for k, v in settings.items() if k in run.settings})
        chosen[group_key(config)] = {"config": config, "trial_id": run.trial_id, "metric": metric,
                                     "score": score(run.metrics, metric),
                                     "held_out": (choosing_score(run.metrics, metric) if chosen_on(run.metrics, metric)
                                                  == "holdout" else None),
                                     "model_uri": logged.get(run.run_id), "tracking_uri": tracking_uri}
    if not chosen:
        raise ConfigError(f"experiment {experiment!r} at {tracking_uri} has no finished trial to export")
    return chosen


def task_definitions(tracking_uri: str, experiment: str, tasks: set[str]) -> dict[str, str]:
    """Task name → the definition (YAML text) the experiment's search logged for it (tasks that are not shipped)."""
    import tempfile

    mlflow_client = tracking.client(tracking_uri)
    experiment_id = tracking.get_experiment(mlflow_client, tracking_uri, experiment).experiment_id
    found: dict[str, str] = {}
    for parent in tracking.find_runs(mlflow_client, experiment_id, **{tracking.TAG_ROLE: "search"}):
        artifacts = mlflow_client.list_artifacts(parent.info.run_id, tracking.TASKS_FOLDER)
        logged = {Path(a.path).stem: a.path for a in artifacts}
        for name in sorted(tasks & set(logged) - set(found)):
            with tempfile.TemporaryDirectory() as folder, _no_progress_bar():
                local = mlflow_client.download_artifacts(parent.info.run_id, logged[name], folder)
                found[name] = Path(local).read_text(encoding="utf-8")
    missing = sorted(tasks - set(found))
    if missing:
        raise ConfigError(f"experiment {experiment!r} holds no logged definition of task(s) {', '.join(missing)}: "
                          "export them from the search that ran them")
    return found


@contextlib.contextmanager
def _no_progress_bar():
    """MLflow's artifact download bar off (its setting is read at each download)."""
    previous = os.environ.get(PROGRESS_BAR_ENV)
    os.environ[PROGRESS_BAR_ENV] = "false"
    try:
        yield
    finally:
        os.environ.pop(PROGRESS_BAR_ENV) if previous is None else os.environ.update({PROGRESS_BAR_ENV: previous})


PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def write_best(chosen: dict[str, dict[str, Any]], output: str | Path, experiment: str,
               definitions: dict[str, str] | None = None) -> list[Path]:
    """``output`` with every group, one ``train --config`` file per group beside it, and each task definition of
    ``definitions`` (name → YAML) as ``task-<name>.yaml``, named by the configurations of that task; the paths
    written."""
    path = Path(output)
    if not path.parent.is_dir():
        raise ConfigError(f"--output {str(output)!r}: the folder {str(path.parent)!r} does not exist; create it or "
                          "write elsewhere")
    written = []
    for name, text in (definitions or {}).items():
        task_file = path.with_name(f"task-{name}.yaml")
        task_file.write_text(f"# Task {name} as experiment {experiment} read it: train --config files name this "
                             "file.\n" + text, "utf-8")
        written.append(task_file)
        for found in chosen.values():
            if found["config"]["task"] == name:
                found["config"]["task"] = task_file.name
    for key, found in chosen.items():
        single = path.with_name(f"{path.stem}-{key.replace('/', '-')}{path.suffix or '.yaml'}")
        held = found.get("held_out")
        chose = (f"chosen by held-out {found['metric']} {held:.4f}; dev {found['metric']} {found['score']:.4f}"
                 if held is not None else
                 f"chosen by dev {found['metric']} {found['score']:.4f}: no data held out, the dev set chose it")
        head = (f"# The best configuration of {key} in experiment {experiment} (trial {found['trial_id']}, "
                f"{chose}).\n"
                f"# Train it again: istar-tune train --config {single.name}\n")
        if found.get("model_uri"):
            head += ("# Its weights as an MLflow model (a models:/ URI is looked up in its store: set that first):\n"
                     f"#   import mlflow; mlflow.set_tracking_uri({found['tracking_uri']!r})\n"
                     f"#   model = mlflow.pyfunc.load_model({found['model_uri']!r})\n")
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
    if Path(output).is_dir():
        raise ConfigError(f"--output {str(output)!r} is a folder: name the YAML file, e.g. "
                          f"{str(Path(output) / 'best.yaml')!r} (the per-group files go beside it)")
    chosen = best_configurations(tracking_uri, experiment, simulated, models, tasks, methods)
    own = {found["config"]["task"] for found in chosen.values() if not is_shipped(found["config"]["task"])}
    paths = write_best(chosen, output, experiment, task_definitions(tracking_uri, experiment, own) if own else None)
    configs = [p.name for p in paths[1:] if not p.name.startswith("task-")]
    definitions = [p.name for p in paths[1:] if p.name.startswith("task-")]
    return (f"wrote {paths[0]} and {len(configs)} train --config file(s): {', '.join(configs)}"
            + (f"; task definition(s): {', '.join(definitions)}" if definitions else ""))
