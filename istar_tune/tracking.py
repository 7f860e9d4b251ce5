"""MLflow tracking of searches: one experiment per search name, a parent run per search, a child run per trial.

This module knows MLflow and nothing of Ray (reading runs back loads neither Ray nor torch). Searches write through
:class:`RunWriter`, a background thread fed by the Tune callback in ``tune_callbacks.py``: batched, retried on
transient errors and flushed at the end, so a slow or briefly unreachable tracking server never blocks Tune's event
loop, and trials never write the store concurrently. A trial's run is found again by its trial-id tag, so a resumed
search continues the same runs instead of creating duplicates.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
TAG_SIMULATED = "istar_tune.simulated"  # "true" on the runs of a rehearsal (``--simulate``)
TAG_RESTORED_FROM = "istar_tune.restored_from"
TAG_PLAN = "istar_tune.plan"  # on the parent run: trials planned per group (JSON), for `istar-tune status`
MAX_TAG_CHARS = 7000
PAGE_SIZE = 5000

log = logging.getLogger(__name__)

# Before MLflow is imported (it reads these once): no "View run" lines per terminated run of a tracking server
# (thousands in a large search), and no usage telemetry wrapped around every client call (measurable driver time
# at thousands of trials). Both can be set otherwise in the environment.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def prepare_store(tracking_uri: str) -> None:
    """Create a new sqlite store's tables once, under a file lock, so searches starting together on a new store do
    not race MLflow's schema creation."""
    if not tracking_uri.startswith("sqlite:///"):
        return
    import fcntl

    path = Path(tracking_uri[len("sqlite:///"):])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client(tracking_uri).search_experiments(max_results=1)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


PLAN_TOTAL = "*"
"""The key of a plan tag that holds only the total (the groups did not fit in a tag)."""


def encode_plan(plan: dict[str, int]) -> str:
    """Trials planned per group as a tag value (the total alone when the groups would not fit in a tag)."""
    import json

    text = json.dumps(plan, separators=(",", ":"))
    return text if len(text) <= MAX_TAG_CHARS else json.dumps({PLAN_TOTAL: sum(plan.values())})


def decode_plan(text: str | None) -> dict[str, int] | None:
    """A plan tag's groups; ``None`` when there is no tag or it holds only the total."""
    import json

    plan = json.loads(text) if text else None
    return None if plan is None or PLAN_TOTAL in plan else plan


def record_plan(mlflow_client, parent_run_id: str, plan: dict[str, int]) -> None:
    """Tag the parent run with the trials planned per group: this run's groups, merged with those an earlier run
    into the same experiment planned (a search run again for other models keeps every group it ever planned, so
    :func:`planned_groups` may rely on it)."""
    earlier_text = mlflow_client.get_run(parent_run_id).data.tags.get(TAG_PLAN)
    earlier = decode_plan(earlier_text)
    if earlier_text and earlier is None:  # the earlier plan kept only its total: the groups stay unknown
        merged_text = encode_plan({PLAN_TOTAL: 0, **plan})
    else:
        merged_text = encode_plan({**(earlier or {}), **plan})
    mlflow_client.set_tag(parent_run_id, TAG_PLAN, merged_text)


def planned_groups(mlflow_client, experiment_id: str) -> set[str] | None:
    """``model/task/method`` of every group the experiment's searches planned (their parent runs' plan tags);
    ``None`` when that is unknown (no parent run, or a plan that kept only its total)."""
    parents = find_runs(mlflow_client, experiment_id, **{TAG_ROLE: "search"})
    groups: set[str] = set()
    for parent in parents:
        plan = decode_plan(parent.data.tags.get(TAG_PLAN))
        if plan is None:
            return None
        groups |= set(plan)
    return groups if parents else None


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


SCHEMES = ("sqlite:///", "http://", "https://", "postgresql://", "mysql://", "databricks")
"""Tracking URI schemes istar-tune accepts."""


def check_reachable(tracking_uri: str) -> None:
    """Fail with one clear line for an unknown scheme or a tracking server that does not answer in 5 s (MLflow
    itself retries an unreachable server for minutes)."""
    from istar_tune.errors import ConfigError

    if not tracking_uri.startswith(SCHEMES):
        raise ConfigError(f"tracking URI {tracking_uri!r}: unknown scheme; use one of "
                          f"{', '.join(s.rstrip(':/') for s in SCHEMES)} (e.g. sqlite:///path/mlflow.db or "
                          "http://host:5000)")
    if tracking_uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=5)
        except OSError as err:
            raise ConfigError(f"cannot reach the MLflow server at {tracking_uri} ({getattr(err, 'reason', err)}): "
                              "start it or fix --tracking-uri / MLFLOW_TRACKING_URI") from None


def check_store(tracking_uri: str) -> None:
    """As :func:`check_reachable`, and a local sqlite store to read from must exist (MLflow would create an empty
    one)."""
    from istar_tune.errors import ConfigError

    check_reachable(tracking_uri)
    if tracking_uri.startswith("sqlite:///") and not Path(tracking_uri[len("sqlite:///"):]).is_file():
        raise ConfigError(f"no MLflow store at {tracking_uri}: run a search first, or give --tracking-uri of an "
                          "existing store")


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


def quote(value: str) -> str:
    """``value`` as a string literal of an MLflow filter. MLflow strips the quotes without unescaping, so a value
    holding both quote characters cannot be written; such names are refused when a search is named."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"{value!r} holds both quote characters and cannot be matched in an MLflow filter")


def find_runs(mlflow_client, experiment_id: str, **tags: str) -> list:
    """Every run of the experiment whose tags equal ``tags``, read page by page (no cap on the count)."""
    query = " and ".join(f"tags.`{k}` = {quote(v)}" for k, v in tags.items())
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs([experiment_id], filter_string=query, max_results=PAGE_SIZE,
                                         page_token=token)
        runs.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return runs


def parent_run(mlflow_client, experiment_id: str, search_name: str, tags: dict[str, str]) -> str:
    """The search's parent run: the existing one when resuming, else a new one."""
    existing = find_runs(mlflow_client, experiment_id, **{TAG_ROLE: "search"})
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
            "time_since_restore", "timesteps_total", "episodes_total", "done", "stage", "simulated",
            "torch_imported"}
    return {k: float(v) for k, v in result.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def resolved_hyperparameters(config: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter of a trial, defaults filled in and λ resolved for the method."""
    from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, as_dict, from_dict

    hparams = from_dict(Hyperparameters, {k: v for k, v in config.items() if k in HYPERPARAMETER_KEYS},
                        source="trial config")
    return {**as_dict(hparams), "lam": hparams.penalty_weight}


# ----------------------------------------------------------------------------------------------- writing


@dataclass
class _Event:
    kind: str  # start | metrics | tags | end
    trial_id: str
    payload: dict[str, Any]
    queued: float = field(default_factory=time.monotonic)


class RunWriter:
    """Writes trials' child runs from background threads: batched, retried, flushed on :meth:`close`.

    ``start(trial_id, config)`` creates (or, on resume, finds) the trial's run; ``metrics(trial_id, epoch, result)``
    logs an epoch once (an epoch MLflow already holds is skipped, so a restored trial's re-reports are not doubled);
    ``set_tags`` sets tags; ``end(trial_id, status, state)`` sets the status tag and terminates the run. Calls
    return at once. Trials are spread over ``threads`` writers (one trial's writes stay in order on one of them),
    so a tracking server's latency is paid in parallel. A failed write is retried with back-off for up to
    ``retry_for_s`` seconds; the MLflow store's duplicate check makes a retried batch harmless.
    """

    def __init__(self, tracking_uri: str, experiment_id: str, search_name: str, parent_run_id: str,
                 tags: dict[str, str], retry_for_s: float = 900.0, threads: int = 8, make_client=None,
                 window_s: float = 0.5):
        self.tracking_uri = tracking_uri
        self.make_client = make_client or client
        self.experiment_id = experiment_id
        self.search_name = search_name
        self.parent_run_id = parent_run_id
        self.tags = dict(tags)
        self.retry_for_s = retry_for_s
        self.window_s = window_s
        self.latencies_ms: list[float] = []
        """Time from each call to its write landing in the store (kept for the first 500,000 calls)."""
        self.errors: list[str] = []
        self._runs: dict[str, str] = {}
        self._logged_epoch: dict[str, int] = {}
        self._params: dict[str, list] = {}
        self._open: set[str] = set()
        self._client = None
        self._loaded = False
        self._load_lock = threading.Lock()
        self._queues: list[queue.Queue[_Event | None]] = [queue.Queue() for _ in range(max(1, threads))]
        self._threads = [threading.Thread(target=self._loop, args=(q,), name=f"istar-tune-mlflow-{i}", daemon=True)
                         for i, q in enumerate(self._queues)]
        for thread in self._threads:
            thread.start()

    # -- the callers' side
    def _put(self, event: _Event) -> None:
        self._queues[hash(event.trial_id) % len(self._queues)].put(event)

    def start(self, trial_id: str, config: dict[str, Any]) -> None:
        self._open.add(trial_id)
        self._put(_Event("start", trial_id, {"config": dict(config)}))

    def metrics(self, trial_id: str, epoch: int, result: dict[str, Any]) -> None:
        values = {**_metrics_of(result), "epoch": float(epoch)}  # read back on resume: the last epoch logged
        self._put(_Event("metrics", trial_id, {"epoch": int(epoch), "values": values,
                                               "time": int(time.time() * 1000)}))

    def set_tags(self, trial_id: str, tags: dict[str, str]) -> None:
        self._put(_Event("tags", trial_id, {"tags": {k: str(v)[:MAX_TAG_CHARS] for k, v in tags.items()}}))

    def end(self, trial_id: str, status: str, state: str, tags: dict[str, str] | None = None) -> None:
        self._open.discard(trial_id)
        self._put(_Event("end", trial_id, {"status": status, "state": state, "tags": dict(tags or {})}))

    def open_trials(self) -> set[str]:
        """Trials started and not yet ended (as far as the calls made so far say)."""
        return set(self._open)

    def pending(self) -> int:
        return sum(q.unfinished_tasks for q in self._queues)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call so far is written; False if ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending():
            if not all(t.is_alive() for t in self._threads) or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(0.02)
        return True

    def close(self, timeout: float | None = None) -> bool:
        done = self.flush(timeout)
        if self._params:  # runs that never logged an epoch or ended while this writer ran
            mlflow_client = self.make_client(self.tracking_uri)
            for run_id in list(self._params):
                try:
                    self._retrying(lambda r=run_id: self._log_batch(mlflow_client, r, [], []))
                except Exception as err:  # noqa: BLE001
                    self.errors.append(f"{type(err).__name__}: {err}")
        for q in self._queues:
            q.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        return done

    # -- the writer threads
    def _loop(self, events: queue.Queue) -> None:
        mlflow_client = self.make_client(self.tracking_uri)
        while True:
            first = events.get()
            if first is None:
                events.task_done()
                return
            if self.window_s:
                time.sleep(self.window_s)  # let a trial's next writes join this batch: fewer calls to the store
            batch, stop = [first], False
            while len(batch) < 1000:
                try:
                    event = events.get_nowait()
                except queue.Empty:
                    break
                if event is None:
                    stop = True
                    events.task_done()
                    break
                batch.append(event)
            try:
                self._retrying(lambda b=batch: self._write(mlflow_client, b))
            except Exception as err:  # noqa: BLE001 - reported by the search; the thread must keep serving
                self.errors.append(f"{type(err).__name__}: {err}")
                log.error("MLflow writes lost after %.0f s of retries: %s", self.retry_for_s, err)
            now = time.monotonic()
            if len(self.latencies_ms) < 500_000:
                self.latencies_ms.extend((now - e.queued) * 1000.0 for e in batch)
            for _ in batch:
                events.task_done()
            if stop:
                return

    def _retrying(self, write) -> None:
        began, delay, warned = time.monotonic(), 0.25, False
        while True:
            try:
                write()
                if warned:
                    log.warning("MLflow store reachable again; pending writes done")
                return
            except Exception as err:  # noqa: BLE001 - transient server or network errors are retried
                if time.monotonic() - began > self.retry_for_s:
                    raise
                if not warned:
                    log.warning("MLflow write failed (%s: %s); retrying in the background", type(err).__name__,
                                str(err).splitlines()[0][:200] if str(err) else "")
                    warned = True
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _load_existing(self, mlflow_client) -> None:
        """The runs of trials an earlier driver of this search created: one paginated read, before the first
        run is created."""
        with self._load_lock:
            if self._loaded:
                return
            for run in find_runs(mlflow_client, self.experiment_id, **{TAG_ROLE: "trial"}):
                trial_id = run.data.tags.get(TAG_TRIAL_ID)
                if trial_id and trial_id not in self._runs:
                    self._runs[trial_id] = run.info.run_id
                    self._logged_epoch[trial_id] = int(run.data.metrics.get("epoch", 0))
            self._loaded = True

    def _run_id(self, mlflow_client, trial_id: str, config: dict[str, Any] | None) -> tuple[str, bool]:
        """The trial's run id, and whether it was created now."""
        if not self._loaded:
            self._load_existing(mlflow_client)
        if trial_id in self._runs:
            return self._runs[trial_id], False
        from mlflow.entities import Param

        config = config or {}
        tags = {**self.tags, TAG_ROLE: "trial", TAG_SEARCH: self.search_name, TAG_TRIAL_ID: trial_id,
                TAG_PARENT: self.parent_run_id, TAG_STATUS: "running", "model": str(config.get("model")),
                "task": str(config.get("task")), "method": str(config.get("method")),
                TAG_GROUP: f"{config.get('model')}/{config.get('task')}/{config.get('method')}"}
        run = mlflow_client.create_run(self.experiment_id, run_name=trial_id, tags=tags)
        run_id = self._runs[trial_id] = run.info.run_id
        self._logged_epoch[trial_id] = 0
        # Params go with the run's next batch of metrics or tags (one call fewer per trial).
        self._params[run_id] = [Param(k, str(v)) for k, v in sorted(resolved_hyperparameters(config).items())]
        return run_id, True

    def _log_batch(self, mlflow_client, run_id: str, metrics: list, tags: list) -> None:
        """One ``log_batch`` per MLflow's limits (1,000 entities, 100 params), the run's pending params included."""
        params = self._params.get(run_id, [])
        calls = max(math.ceil(len(metrics) / 800), math.ceil(len(params) / 100), 1)
        for call in range(calls):
            mlflow_client.log_batch(run_id, metrics=metrics[call * 800:(call + 1) * 800],
                                    params=params[call * 100:(call + 1) * 100], tags=tags if call == 0 else [])
        self._params.pop(run_id, None)

    def _write(self, mlflow_client, batch: list[_Event]) -> None:
        from mlflow.entities import Metric, RunTag

        # Runs first (a run is created once: after a failed attempt its id is already known, or found again).
        created = set()
        for event in batch:
            if event.kind == "start":
                run_id, new = self._run_id(mlflow_client, event.trial_id, event.payload["config"])
                if new:
                    created.add(run_id)
        metrics: dict[str, list] = {}
        tags: dict[str, dict[str, str]] = {}
        states: dict[str, str] = {}
        logged = {}
        for event in batch:
            run_id = self._run_id(mlflow_client, event.trial_id, None)[0]
            if event.kind == "start":
                if run_id not in created:  # a retried or resumed trial's existing run
                    tags.setdefault(run_id, {})[TAG_STATUS] = "running"
                    states[run_id] = "RUNNING"
            elif event.kind == "metrics":
                epoch = event.payload["epoch"]
                if epoch <= logged.get(event.trial_id, self._logged_epoch.get(event.trial_id, 0)):
                    continue  # re-reported after a restore: MLflow already holds this epoch
                logged[event.trial_id] = epoch
                metrics.setdefault(run_id, []).extend(
                    Metric(k, v, event.payload["time"], epoch) for k, v in event.payload["values"].items())
            elif event.kind == "tags":
                tags.setdefault(run_id, {}).update(event.payload["tags"])
            elif event.kind == "end":
                tags.setdefault(run_id, {}).update({TAG_STATUS: event.payload["status"], **event.payload["tags"]})
                states[run_id] = event.payload["state"]
        for run_id in dict.fromkeys([*metrics, *tags]):
            self._log_batch(mlflow_client, run_id, metrics.get(run_id, []),
                            [RunTag(k, v) for k, v in tags.get(run_id, {}).items()])
        for run_id, state in states.items():
            if state == "RUNNING":
                mlflow_client.update_run(run_id, status="RUNNING")
            else:
                mlflow_client.set_terminated(run_id, state)
        self._logged_epoch.update(logged)


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
    simulated: bool = False

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.model, self.task, self.method)


def trial_runs(tracking_uri: str, experiment_name: str, simulated: bool = False) -> list[TrialRun]:
    """Every trial run of a search (MLflow is the source of truth).

    Runs of a rehearsal (``--simulate``) are never mixed with real ones: with ``simulated=False`` an experiment
    holding simulated runs is refused, with ``simulated=True`` one holding real runs is.
    """
    mlflow_client = client(tracking_uri)
    experiment = _experiment(mlflow_client, tracking_uri, experiment_name)
    found = find_runs(mlflow_client, experiment.experiment_id, **{TAG_ROLE: "trial"})
    _refuse_mixed(found, simulated, tracking_uri, experiment_name)
    return [_trial_run(run) for run in found]


def _experiment(mlflow_client, tracking_uri: str, experiment_name: str):
    from istar_tune.errors import ConfigError

    experiment = mlflow_client.get_experiment_by_name(experiment_name)
    if experiment is None:
        names = sorted(e.name for e in mlflow_client.search_experiments())
        raise ConfigError(f"no MLflow experiment named {experiment_name!r} at {tracking_uri}; "
                          f"experiments there: {', '.join(names) or 'none'}")
    return experiment


def _refuse_mixed(found: list, simulated: bool, tracking_uri: str, experiment_name: str) -> None:
    from istar_tune.errors import ConfigError

    kinds = {run.data.tags.get(TAG_SIMULATED) == "true" for run in found}
    if (not simulated) in kinds:
        what = ("simulated runs (a rehearsal with --simulate)", "pass --simulated to tabulate them") if not simulated \
            else ("real runs", "drop --simulated")
        raise ConfigError(f"experiment {experiment_name!r} at {tracking_uri} holds {what[0]}; they are never mixed "
                          f"into tables of {'real' if not simulated else 'simulated'} runs: {what[1]}")


def _trial_run(run) -> TrialRun:
    from istar_tune.config import HYPERPARAMETER_KEYS, Hyperparameters, from_dict

    tags, params = run.data.tags, run.data.params
    typed = from_dict(Hyperparameters, {k: v for k, v in params.items() if k in HYPERPARAMETER_KEYS},
                      source=f"run {run.info.run_id}")
    return TrialRun(run_id=run.info.run_id, trial_id=tags.get(TAG_TRIAL_ID, ""), model=typed.model,
                    task=typed.task, method=typed.method, status=tags.get(TAG_STATUS, "unknown"),
                    config={k: getattr(typed, k) for k in params if k in HYPERPARAMETER_KEYS},
                    metrics=dict(run.data.metrics), stage=tags.get(TAG_STAGE, "search"),
                    simulated=tags.get(TAG_SIMULATED) == "true")


def best_trials(tracking_uri: str, experiment_name: str, simulated: bool = False,
                groups: list[tuple[str, str, str]] | None = None) -> dict[tuple, TrialRun]:
    """The best finished (or early-stopped) trial per (model, task, method), by its score (``metrics.score``: the
    task metric at its scored epoch); ties go to the lowest trial id.

    With ``groups``, only those, each read by one query of its runs ordered by the metric (the top
    :data:`BEST_OF_TOP` runs; the whole group when they do not settle it), instead of every run of the experiment:
    a seeds stage after a 19,000-trial grid reads a few hundred runs, not all of them. Groups that no search of the
    experiment planned (its parent runs' plan tags) are not asked for.
    """
    if groups is None:
        return _best_of(trial_runs(tracking_uri, experiment_name, simulated))
    from istar_tune.metrics import SCORED_PREFIX
    from istar_tune.tasks import get_task

    mlflow_client = client(tracking_uri)
    experiment = _experiment(mlflow_client, tracking_uri, experiment_name)
    held = planned_groups(mlflow_client, experiment.experiment_id)
    best: dict[tuple, TrialRun] = {}
    for model, task, method in groups:
        if held is not None and f"{model}/{task}/{method}" not in held:
            continue  # no search of this experiment planned the group: no query
        tags = {TAG_ROLE: "trial", TAG_GROUP: f"{model}/{task}/{method}"}
        metric = get_task(task).metric
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
        chosen = next(iter(_best_of([_trial_run(r) for r in found]).values()), None)
        if chosen is not None:
            best[(model, task, method)] = chosen
    return best


BEST_OF_TOP = 50
"""Runs per group :func:`best_trials` reads first, ordered by the metric."""
COUNTED_STATUSES = ("finished", "stopped_early")


def _best_of(runs: list[TrialRun]) -> dict[tuple, TrialRun]:
    from istar_tune.metrics import best_scored, score
    from istar_tune.tasks import get_task

    by_group: dict[tuple, list[TrialRun]] = {}
    for run in runs:
        if run.status in COUNTED_STATUSES:
            by_group.setdefault(run.group, []).append(run)
    chosen = {group: best_scored(candidates, lambda r: r.trial_id,
                                 lambda r: score(r.metrics, get_task(r.task).metric))
              for group, candidates in by_group.items()}
    return {group: run for group, run in chosen.items() if run is not None}
