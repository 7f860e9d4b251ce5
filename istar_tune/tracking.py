"""MLflow tracking of searches: one experiment per search name, a parent run per search, a child run per trial.

Everything is written from the Ray driver by :class:`MlflowTrialLogger` (a Tune callback), one batch per reported
epoch, so trials never write the tracking store concurrently. A trial's run is found again by its trial-id tag, so
a resumed search continues the same runs instead of creating duplicates (Ray's own ``MLflowLoggerCallback``
starts a second run per trial after a restore).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune import Callback as TuneCallback

TAG_ROLE = "istar_tune.role"  # "search" for the parent run, "trial" for a child
TAG_SEARCH = "istar_tune.search"
TAG_TRIAL_ID = "istar_tune.trial_id"
TAG_GROUP = "istar_tune.group"
TAG_STATUS = "istar_tune.status"  # running | finished | stopped_early | failed
TAG_ERROR = "istar_tune.error"
TAG_SPACE = "istar_tune.search_space"
TAG_COMMIT = "istar_tune.git_commit"
TAG_STAGE = "istar_tune.stage"  # search | seeds
TAG_NODE = "istar_tune.node_id"  # the Ray node that ran the trial (its last attempt)
TAG_PARENT = "mlflow.parentRunId"
MAX_TAG_CHARS = 7000


def default_tracking_uri(storage_path: str | os.PathLike) -> str:
    """``sqlite:///<storage>/mlflow.db`` for a local storage path."""
    return f"sqlite:///{Path(storage_path).expanduser().resolve() / 'mlflow.db'}"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def check_store(tracking_uri: str) -> None:
    """Fail with one clear line when a store to read from is missing or unreachable (MLflow itself would create
    an empty sqlite file, or retry an unreachable server for minutes)."""
    from istar_tune.errors import ConfigError

    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri[len("sqlite:///"):])
        if not path.is_file():
            raise ConfigError(f"no MLflow store at {tracking_uri}: run a search first, or give --tracking-uri of an "
                              "existing store")
        return
    if tracking_uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=10)
        except OSError as err:
            raise ConfigError(f"cannot reach the MLflow server at {tracking_uri}: {err}; start it or fix "
                              "--tracking-uri") from None


def ensure_experiment(mlflow_client, name: str, artifact_root: str | None = None) -> str:
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            mlflow_client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    location = None
    if artifact_root:
        location = (Path(artifact_root) / name).resolve().as_uri()
    return mlflow_client.create_experiment(name, artifact_location=location)


def _escape(value: str) -> str:
    return value.replace("'", "\\'")


def find_runs(mlflow_client, experiment_id: str, **tags: str) -> list:
    query = " and ".join(f"tags.`{k}` = '{_escape(v)}'" for k, v in tags.items())
    return mlflow_client.search_runs([experiment_id], filter_string=query, max_results=5000)


def parent_run(mlflow_client, experiment_id: str, search_name: str, tags: dict[str, str]) -> str:
    """The search's parent run: the existing one when resuming, else a new one."""
    existing = find_runs(mlflow_client, experiment_id, **{TAG_ROLE: "search", TAG_SEARCH: search_name})
    if existing:
        run_id = existing[0].info.run_id
        if existing[0].info.status != "RUNNING":
            mlflow_client.update_run(run_id, status="RUNNING")
        return run_id
    run = mlflow_client.create_run(experiment_id, run_name=search_name,
                                   tags={TAG_ROLE: "search", TAG_SEARCH: search_name, **tags})
    return run.info.run_id


def _metrics_of(result: dict[str, Any]) -> dict[str, float]:
    """The numeric values of a reported epoch that belong in MLflow (Ray's bookkeeping left out)."""
    skip = {"training_iteration", "timestamp", "time_this_iter_s", "time_total_s", "pid", "iterations_since_restore",
            "time_since_restore", "timesteps_total", "episodes_total", "done", "epoch", "stage"}
    return {k: float(v) for k, v in result.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def resolved_hyperparameters(config: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter of a trial, defaults filled in and λ resolved for the method."""
    from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, as_dict, from_dict

    hparams = from_dict(Hyperparameters, {k: v for k, v in config.items() if k in HYPERPARAMETER_KEYS},
                        source="trial config")
    return {**as_dict(hparams), "lam": hparams.penalty_weight}


def expected_epochs(config: dict[str, Any]) -> int:
    return int(config.get("epochs", 0)) + (int(config.get("isolayer_epochs", 1)) if config.get("method") == "isolayer"
                                            else 0)


class MlflowTrialLogger(TuneCallback):
    """Tune callback: a child run per trial, per-epoch metrics with ``step = epoch``, the final status.

    Holds only plain values, so Ray can pickle it with the experiment and restore it on ``--resume``; the MLflow
    client is created in :meth:`setup`.
    """

    def __init__(self, tracking_uri: str, search_name: str, parent_run_id: str, experiment_id: str,
                 tags: dict[str, str]):
        self.tracking_uri = tracking_uri
        self.search_name = search_name
        self.parent_run_id = parent_run_id
        self.experiment_id = experiment_id
        self.tags = dict(tags)
        self._client = None
        self._runs: dict[str, str] = {}
        self._last_epoch: dict[str, int] = {}
        self._nodes: dict[str, str] = {}
        self._logged_epoch: dict[str, int] = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_client=None, _runs={}, _last_epoch={}, _nodes={}, _logged_epoch={})
        return state

    def setup(self, **info):
        self._client = client(self.tracking_uri)

    @property
    def mlflow(self):
        if self._client is None:
            self._client = client(self.tracking_uri)
        return self._client

    def run_id(self, trial) -> str:
        """The trial's child run: found by its trial-id tag (resume), else created with params and tags."""
        if trial.trial_id in self._runs:
            return self._runs[trial.trial_id]
        found = find_runs(self.mlflow, self.experiment_id, **{TAG_TRIAL_ID: trial.trial_id,
                                                               TAG_SEARCH: self.search_name})
        if found:
            run_id = found[0].info.run_id
            history = self.mlflow.get_metric_history(run_id, "objective")
            self._logged_epoch[trial.trial_id] = max((m.step for m in history), default=0)
        else:
            from mlflow.entities import Param

            config = trial.config
            tags = {**self.tags, TAG_ROLE: "trial", TAG_SEARCH: self.search_name, TAG_TRIAL_ID: trial.trial_id,
                    TAG_PARENT: self.parent_run_id, "model": str(config.get("model")),
                    "task": str(config.get("task")), "method": str(config.get("method")),
                    TAG_GROUP: f"{config.get('model')}/{config.get('task')}/{config.get('method')}"}
            run = self.mlflow.create_run(self.experiment_id, run_name=f"{trial.trial_id}", tags=tags)
            run_id = run.info.run_id
            params = [Param(k, str(v)) for k, v in sorted(resolved_hyperparameters(config).items())]
            for start in range(0, len(params), 100):
                self.mlflow.log_batch(run_id, params=params[start:start + 100])
        self._runs[trial.trial_id] = run_id
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        run_id = self.run_id(trial)
        self.mlflow.update_run(run_id, status="RUNNING")
        self.mlflow.set_tag(run_id, TAG_STATUS, "running")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        from mlflow.entities import Metric

        epoch = int(result.get("epoch", result.get("training_iteration", 0)))
        run_id = self.run_id(trial)
        if result.get("node_id") and self._nodes.get(trial.trial_id) != result["node_id"]:
            self._nodes[trial.trial_id] = result["node_id"]
            self.mlflow.set_tag(run_id, TAG_NODE, result["node_id"])
        self._last_epoch[trial.trial_id] = epoch
        if epoch <= self._logged_epoch.get(trial.trial_id, 0):
            return  # re-reported after a restore: MLflow already holds this epoch
        self._logged_epoch[trial.trial_id] = epoch
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, epoch) for k, v in _metrics_of(result).items()]
        self.mlflow.log_batch(run_id, metrics=metrics)

    def on_trial_complete(self, iteration, trials, trial, **info):
        run_id = self.run_id(trial)
        last = self._last_epoch.get(trial.trial_id)
        if last is None and trial.last_result:
            last = int(trial.last_result.get("epoch", 0))
        stopped = last is not None and last < expected_epochs(trial.config)
        self.mlflow.set_tag(run_id, TAG_STATUS, "stopped_early" if stopped else "finished")
        if stopped:
            self.mlflow.set_tag(run_id, "istar_tune.stopped_after_epoch", str(last))
        self.mlflow.set_terminated(run_id, "FINISHED")

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.mlflow.set_tag(self.run_id(trial), "istar_tune.retries", str(getattr(trial, "num_failures", "")))

    def on_trial_error(self, iteration, trials, trial, **info):
        run_id = self.run_id(trial)
        self.mlflow.set_tag(run_id, TAG_STATUS, "failed")
        self.mlflow.set_tag(run_id, TAG_ERROR, trial_error_text(trial)[:MAX_TAG_CHARS])
        self.mlflow.set_terminated(run_id, "FAILED")


def error_summary(text: str, fallback: str) -> str:
    """The last line of an error text that names the error (``...Error: ...``), else its last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (named[-1] if named else (lines[-1] if lines else fallback)).strip()


def trial_error_text(trial) -> str:
    """The last line that names the error in a trial's error file (the full traceback stays with Ray).

    Ray writes the file on the driver first (``error_file``) and syncs it to storage later (``get_error``).
    """
    text = ""
    try:
        local = trial.error_file
        if local and Path(local).is_file():
            text = Path(local).read_text(errors="replace")
        else:
            error = trial.get_error()
            text = str(error) if error is not None else ""
    except Exception:  # noqa: BLE001 - an unreadable error file must not break logging
        text = ""
    return error_summary(text, "unknown error")


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

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.model, self.task, self.method)


def trial_runs(tracking_uri: str, experiment_name: str) -> list[TrialRun]:
    """Every trial run of a search (MLflow is the source of truth)."""
    from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, from_dict
    from istar_tune.errors import ConfigError

    mlflow_client = client(tracking_uri)
    experiment = mlflow_client.get_experiment_by_name(experiment_name)
    if experiment is None:
        names = sorted(e.name for e in mlflow_client.search_experiments())
        raise ConfigError(f"no MLflow experiment named {experiment_name!r} at {tracking_uri}; "
                          f"experiments there: {', '.join(names) or 'none'}")
    runs = []
    for run in find_runs(mlflow_client, experiment.experiment_id, **{TAG_ROLE: "trial"}):
        tags, params = run.data.tags, run.data.params
        typed = from_dict(Hyperparameters, {k: v for k, v in params.items() if k in HYPERPARAMETER_KEYS},
                          source=f"run {run.info.run_id}")
        runs.append(TrialRun(run_id=run.info.run_id, trial_id=tags.get(TAG_TRIAL_ID, ""), model=typed.model,
                             task=typed.task, method=typed.method, status=tags.get(TAG_STATUS, "unknown"),
                             config={k: getattr(typed, k) for k in params if k in HYPERPARAMETER_KEYS},
                             metrics=dict(run.data.metrics), stage=tags.get(TAG_STAGE, "search")))
    return runs


def best_trials(tracking_uri: str, experiment_name: str) -> dict[tuple, TrialRun]:
    """The best finished (or early-stopped) trial per (model, task, method), by its task metric after its last
    epoch."""
    from istar_tune.tasks import get_task

    best: dict[tuple, TrialRun] = {}
    for run in sorted(trial_runs(tracking_uri, experiment_name), key=lambda r: r.trial_id):  # ties: lowest id
        metric = get_task(run.task).metric
        if run.status not in ("finished", "stopped_early") or metric not in run.metrics:
            continue
        current = best.get(run.group)
        if current is None or run.metrics[metric] > current.metrics[metric]:
            best[run.group] = run
    return best
