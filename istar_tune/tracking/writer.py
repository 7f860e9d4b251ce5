"""Writing trials' child runs: :class:`RunWriter`, background threads fed by the search's Tune callback,
batched, retried on transient errors and flushed at the end, so a slow or briefly unreachable tracking server never
blocks Tune's event loop. A trial's run is found again by its trial-id tag, so a resumed search continues the same
runs instead of creating duplicates.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from istar_tune.config import group_key
from istar_tune.errors import storage_failure
from istar_tune.tracking.datasets import log_inputs
from istar_tune.tracking.earlier import KnownRuns, forget_error
from istar_tune.tracking.naming import logged_params, run_name, task_tags
from istar_tune.tracking.store import (
    MAX_TAG_CHARS,
    TAG_ERROR,
    TAG_GROUP,
    TAG_ROLE,
    TAG_SEARCH,
    TAG_SEARCH_RUN,
    TAG_STATUS,
    TAG_TRIAL_ID,
    client,
    log,
    write_slot,
)
from istar_tune.trial_status import TrialStatus


def _metrics_of(result: dict[str, Any]) -> dict[str, float]:
    """The numeric values of a reported epoch that belong in MLflow (Ray's bookkeeping left out)."""
    skip = {"training_iteration", "timestamp", "time_this_iter_s", "time_total_s", "pid", "iterations_since_restore",
            "time_since_restore", "timesteps_total", "episodes_total", "done", "stage", "simulated",
            "torch_imported"}
    return {k: float(v) for k, v in result.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


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
                 window_s: float = 0.5, settings: dict[str, Any] | None = None, restored: set[str] | None = None):
        self.tracking_uri = tracking_uri
        self.known = KnownRuns(restored)
        """The runs it writes to, an earlier driver's among them (``restored``: as :class:`KnownRuns` takes it)."""
        self.settings = dict(settings or {})
        """The search's run settings, logged with each run's params (``setting.<name>``)."""
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
        self._params: dict[str, list] = {}
        self._open: set[str] = set()
        self._client = None
        self._queues: list[queue.Queue[_Event | None]] = [queue.Queue() for _ in range(max(1, threads))]
        self._threads = [threading.Thread(target=self._loop, args=(q,), name=f"istar-tune-mlflow-{i}", daemon=True)
                         for i, q in enumerate(self._queues)]
        for thread in self._threads:
            thread.start()

    # -- the callers' side
    def _put(self, event: _Event) -> None:
        self._queues[hash(event.trial_id) % len(self._queues)].put(event)

    def start(self, trial_id: str, config: dict[str, Any], tags: dict[str, str] | None = None) -> None:
        """``tags``: set on the run when it is created (``TAG_TRAINED_BY`` of a shared trial's configuration)."""
        self._open.add(trial_id)
        self._put(_Event("start", trial_id, {"config": dict(config), "created_tags": dict(tags or {})}))

    def metrics(self, trial_id: str, epoch: int, result: dict[str, Any]) -> None:
        values = {**_metrics_of(result), "epoch": float(epoch)}  # read back on resume: the last epoch logged
        self._put(_Event("metrics", trial_id, {"epoch": int(epoch), "values": values,
                                               "time": int(time.time() * 1000)}))

    def inputs(self, trial_id: str, described: list[dict[str, Any]]) -> None:
        """The run's dataset inputs (:func:`istar_tune.tracking.datasets.describe`'s splits)."""
        self._put(_Event("inputs", trial_id, {"inputs": described}))

    def set_tags(self, trial_id: str, tags: dict[str, str]) -> None:
        self._put(_Event("tags", trial_id, {"tags": {k: str(v)[:MAX_TAG_CHARS] for k, v in tags.items()}}))

    def end(self, trial_id: str, status: str, state: str, tags: dict[str, str] | None = None) -> None:
        self._open.discard(trial_id)
        self._put(_Event("end", trial_id, {"status": status, "state": state, "tags": dict(tags or {})}))

    def reconcile(self, trial_id: str, config: dict[str, Any], records: list[tuple[int, dict[str, Any]]], status: str,
                  state: str, tags: dict[str, str] | None = None, created_tags: dict[str, str] | None = None) -> None:
        """Make the run of a trial that had ended before this driver started (a resumed search) say so: a driver
        killed just after the trial ended may not have written its last epochs (``records``, ``(epoch, values)`` in
        order: those the run does not hold yet are written) or its end. Runs an earlier driver ended are left as they
        are; a trial without a run gets one."""
        rows = [(int(epoch), {**_metrics_of(values), "epoch": float(epoch)}) for epoch, values in records if epoch]
        self._put(_Event("reconcile", trial_id, {"config": dict(config), "records": rows,
                                                 "time": int(time.time() * 1000), "status": status, "state": state,
                                                 "tags": dict(tags or {}), "created_tags": dict(created_tags or {})}))

    def backfill(self, trial_id: str, config: dict[str, Any], records: list[tuple[int, dict[str, Any]]],
                 status: str = "", tags: dict[str, str] | None = None) -> None:
        """Write the epochs of ``records`` (``(epoch, values)``, in order) that the run does not hold yet, creating
        it (``tags`` at creation) if an earlier driver did not; with ``status``, end it if an earlier driver left it
        running. What a resumed trial's first report carries: epochs a killed driver never wrote."""
        rows = [(int(epoch), {**_metrics_of(values), "epoch": float(epoch)}) for epoch, values in records]
        self._put(_Event("backfill", trial_id, {"config": dict(config), "records": rows, "status": status,
                                                "time": int(time.time() * 1000), "created_tags": dict(tags or {})}))

    def end_unknown(self, known: set[str], status: str, state: str, tags: dict[str, str]) -> list[str]:
        """End the runs left running whose trials are not in ``known`` (the trials Tune holds at the experiment's end)
        and not open here: an earlier driver's run of a trial Tune lost with its last snapshot is never reported
        again. The trial ids ended, in order."""
        self.flush()
        try:
            if not self.known.loaded:  # read by the first write, unless none came
                self._load_existing(self.make_client(self.tracking_uri))
        except Exception as err:  # noqa: BLE001 - a store that cannot be read: counted with the lost writes
            self.errors.append(f"{type(err).__name__}: {err}")
            return []
        lost = self.known.lost(known, self._open)
        for trial_id in lost:
            self._put(_Event("end", trial_id, {"status": status, "state": state, "tags": dict(tags)}))
        return lost

    def is_open(self, trial_id: str) -> bool:
        return trial_id in self._open

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
                given_up = ("at once (no retry mends it)" if storage_failure(str(err))
                            else f"after {self.retry_for_s:.0f} s of retries")
                (log.error if len(self.errors) == 1 else log.debug)(  # the summary counts them; one line here
                    "MLflow writes lost %s: %s", given_up, (str(err).splitlines() or [""])[0][:200])
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
                with write_slot(self.tracking_uri):
                    write()
                if warned:
                    log.warning("MLflow store reachable again; pending writes done")
                return
            except Exception as err:  # noqa: BLE001 - transient server or network errors are retried
                if time.monotonic() - began > self.retry_for_s or storage_failure(str(err)):
                    raise
                if not warned:
                    log.warning("MLflow write failed (%s: %s); retrying in the background", type(err).__name__,
                                str(err).splitlines()[0][:200] if str(err) else "")
                    warned = True
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _load_existing(self, mlflow_client) -> None:
        """The runs an earlier driver of this search created (:class:`~istar_tune.tracking.earlier.KnownRuns`)."""
        self.known.load(mlflow_client, self.experiment_id, self.search_name, self.parent_run_id)

    def _run_id(self, mlflow_client, trial_id: str, config: dict[str, Any] | None,
                created_tags: dict[str, str] | None = None) -> tuple[str, bool]:
        """The trial's run id, and whether it was created now."""
        if not self.known.loaded:
            self._load_existing(mlflow_client)
        run_id, repair = self.known.find(trial_id, config)
        if run_id is not None:
            if repair:
                self._params[run_id] = _params(config, self.settings)
            return run_id, False
        config = config or {}
        tags = {**self.tags, TAG_ROLE: "trial", TAG_SEARCH: self.search_name, TAG_TRIAL_ID: trial_id,
                TAG_SEARCH_RUN: self.parent_run_id, TAG_STATUS: TrialStatus.RUNNING, "model": str(config.get("model")),
                "task": str(config.get("task")), "method": str(config.get("method")),
                TAG_GROUP: group_key(config), **task_tags(config), **(created_tags or {})}
        run = mlflow_client.create_run(self.experiment_id, run_name=run_name(config) if config else trial_id,
                                       tags=tags)
        run_id = run.info.run_id
        self.known.created(trial_id, run_id)
        # The params go with the batch that created the run (with its first metrics when they came along): a run
        # never exists for long without them, and a driver killed in between leaves a run the next one repairs.
        self._params[run_id] = _params(config, self.settings)
        return run_id, True

    def _log_batch(self, mlflow_client, run_id: str, metrics: list, tags: list) -> None:
        """One ``log_batch`` per MLflow's limits (1,000 entities, 100 params), the run's pending params included."""
        params = self._params.get(run_id, [])
        calls = max(math.ceil(len(metrics) / 800), math.ceil(len(params) / 100), 1)
        for call in range(calls):
            mlflow_client.log_batch(run_id, metrics=metrics[call * 800:(call + 1) * 800],
                                    params=params[call * 100:(call + 1) * 100], tags=tags if call == 0 else [])
        self._params.pop(run_id, None)

    def _create_runs(self, mlflow_client, batch: list[_Event]) -> set[str]:
        """The runs a batch starts, created first (once: after a failed attempt a run's id is already known, or
        found again); the ids of those created now."""
        created = set()
        for event in batch:
            if event.kind in ("start", "reconcile", "backfill"):
                run_id, new = self._run_id(mlflow_client, event.trial_id, event.payload["config"],
                                           event.payload.get("created_tags"))
                if new:
                    created.add(run_id)
                    self.known.unended.add(event.trial_id)
        return created

    def _write(self, mlflow_client, batch: list[_Event]) -> None:
        from mlflow.entities import Metric, RunTag

        created = self._create_runs(mlflow_client, batch)
        metrics: dict[str, list] = {}
        tags: dict[str, dict[str, str]] = {}
        states: dict[str, str] = {}
        logged = {}
        restarted: set[str] = set()
        for event in batch:
            run_id = self._run_id(mlflow_client, event.trial_id, None)[0]
            if event.kind == "start":
                if run_id not in created:  # a retried or resumed trial's existing run (or one it took over)
                    tags.setdefault(run_id, {}).update({TAG_STATUS: TrialStatus.RUNNING, TAG_TRIAL_ID: event.trial_id})
                    states[run_id] = "RUNNING"
                    restarted.add(run_id)
            elif event.kind == "metrics":
                epoch = event.payload["epoch"]
                if epoch <= logged.get(event.trial_id, self.known.logged_epoch.get(event.trial_id, 0)):
                    continue  # re-reported after a restore: MLflow already holds this epoch
                logged[event.trial_id] = epoch
                metrics.setdefault(run_id, []).extend(
                    Metric(k, v, event.payload["time"], epoch) for k, v in event.payload["values"].items())
            elif event.kind == "tags":
                tags.setdefault(run_id, {}).update(event.payload["tags"])
            elif event.kind == "inputs":  # MLflow keeps one input per dataset and run: a repeat adds nothing
                log_inputs(mlflow_client, run_id, event.payload["inputs"])
            elif event.kind == "backfill":
                logged[event.trial_id] = self._unlogged(event, logged, metrics.setdefault(run_id, []))
                if event.payload["status"] and event.trial_id in self.known.unended:
                    tags.setdefault(run_id, {})[TAG_STATUS] = event.payload["status"]
                    states[run_id] = "FINISHED"
                    self.known.unended.discard(event.trial_id)
            elif event.kind == "end" or (event.kind == "reconcile" and event.trial_id in self.known.unended):
                if event.kind == "reconcile":  # the epochs whose writes were lost with the earlier driver
                    logged[event.trial_id] = self._unlogged(event, logged, metrics.setdefault(run_id, []))
                tags.setdefault(run_id, {}).update({TAG_STATUS: event.payload["status"], **event.payload["tags"]})
                states[run_id] = event.payload["state"]
                self.known.unended.discard(event.trial_id)
        # Created runs get their params now; a resumed trial's start event tags its run (a repair writes its params).
        for run_id in dict.fromkeys([*created, *(r for r, m in metrics.items() if m), *tags]):
            self._log_batch(mlflow_client, run_id, metrics.get(run_id, []),
                            [RunTag(k, v) for k, v in tags.get(run_id, {}).items()])
        for run_id in restarted - {r for r, t in tags.items() if TAG_ERROR in t}:
            forget_error(mlflow_client, run_id)  # the earlier attempt's error does not describe this one
        for run_id, state in states.items():
            if state == "RUNNING":
                mlflow_client.update_run(run_id, status="RUNNING")
            else:
                mlflow_client.set_terminated(run_id, state)
        self.known.logged_epoch.update(logged)

    def _unlogged(self, event: _Event, logged: dict[str, int], into: list) -> int:
        """Add to ``into`` the metrics of the epochs in ``event``'s records the run does not hold yet (a resumed
        trial's backfill, a reconciled trial's lost writes); the last epoch the run then holds."""
        from mlflow.entities import Metric

        done = logged.get(event.trial_id, self.known.logged_epoch.get(event.trial_id, 0))
        for epoch, values in event.payload["records"]:
            if epoch > done:
                into.extend(Metric(k, v, event.payload["time"], epoch) for k, v in values.items())
                done = epoch
        return done

def _params(config: dict[str, Any], settings: dict[str, Any] | None = None) -> list:
    from mlflow.entities import Param

    return [Param(k, v) for k, v in logged_params(config, settings).items()]
