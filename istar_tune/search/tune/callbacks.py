"""The Tune callbacks of a search: the MLflow logger and the progress lines.

Both run in the Ray driver, on Tune's event loop, so they only hand work on: the logger queues every write for
:class:`istar_tune.tracking.RunWriter`'s thread, the printer writes a line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ray.tune import Callback

from istar_tune import tracking
from istar_tune.config import trial_epochs
from istar_tune.console import say
from istar_tune.metrics import CLOSING_ONLY
from istar_tune.search.stopping import Stop, systemic_cause
from istar_tune.search.tune.scheduler import STOPPED_EARLY
from istar_tune.search.tune.trainable import (
    DATASETS,
    DEV_OBJECTIVE_AT,
    OBJECTIVE_AT,
    RESTORED_RECORDS,
    configurations,
    failed_datasets,
    write_trial_config,
)
from istar_tune.trial_config import SEARCH_KEY, trial_task
from istar_tune.trial_status import TrialStatus

log = logging.getLogger(__name__)

LOST = ("Tune's saved state did not hold this trial when the search resumed (the driver that started it stopped "
        "before its state was written): no trial goes on with this run")
"""The error tag of an earlier driver's run whose trial Tune lost (see :meth:`MlflowTrialLogger.on_experiment_end`)."""


class MlflowTrialLogger(Callback):
    """A child run per trial, its params and tags, per-epoch metrics with ``step = epoch``, its final status.

    Holds only plain values when pickled (Ray stores callbacks with the experiment); the writer thread starts on
    first use. :meth:`close` flushes it; :meth:`interrupt` marks the trials still open as KILLED. When several
    searches share the experiment, each has its logger, which records only the trials of its search.
    """

    def __init__(self, tracking_uri: str, search_name: str, parent_run_id: str, experiment_id: str,
                 tags: dict[str, str], threads: int = 8, settings: dict[str, Any] | None = None,
                 restored: set[str] | None = None):
        self.tracking_uri = tracking_uri
        self.restored = restored
        """A resumed search: the trial ids Tune's restored state holds (see :class:`~istar_tune.tracking.RunWriter`)."""
        self.settings = dict(settings or {})
        self.search_name = search_name
        self.parent_run_id = parent_run_id
        self.experiment_id = experiment_id
        self.tags = dict(tags)
        self.threads = threads
        self._writer: tracking.RunWriter | None = None
        self._nodes: dict[str, str] = {}
        self._reconciled = False
        self.stop: Stop | None = None
        """The search's stopper (set by the search): a trial that ends early after it fired was interrupted, and a
        systemic failure seen here fires it."""

    def __getstate__(self):
        return {**self.__dict__, "_writer": None, "_nodes": {}, "_reconciled": False, "stop": None}

    @property
    def writer(self) -> tracking.RunWriter:
        if self._writer is None:
            self._writer = tracking.RunWriter(self.tracking_uri, self.experiment_id, self.search_name,
                                              self.parent_run_id, self.tags, threads=self.threads,
                                              settings=self.settings, restored=self.restored)
        return self._writer

    def _mine(self, trial) -> bool:
        return trial.config.get(SEARCH_KEY, self.search_name) == self.search_name

    def setup(self, **info):
        _ = self.writer

    def on_step_begin(self, iteration, trials, **info):
        self._reconcile(trials)

    def _reconcile(self, trials) -> None:
        """Once, at the first step of a (resumed) experiment, or at its end when it takes none (every restored trial
        had ended): the trials Tune restored as ended get their runs ended too, with their last epoch (a driver killed
        just after a trial ended may not have written them)."""
        if self._reconciled:
            return
        self._reconciled = True
        from ray.tune.experiment import Trial

        for trial in trials:
            if not self._mine(trial) or trial.status not in (Trial.TERMINATED, Trial.ERROR):
                continue
            last = dict(trial.last_result or {})
            reached = int(last.get("epoch", 0) or 0)
            records = reported_epochs(trial) or ([last] if reached else [])
            for run_id, config, epochs in configurations(trial.trial_id, trial.config):
                if trial.status == Trial.ERROR and epochs > reached:
                    error = {tracking.TAG_ERROR: tracking.trial_error_text(trial)}
                    status, state, tags = TrialStatus.FAILED, "FAILED", error
                else:
                    status, state, tags = tracking.ended_status(config, reached), "FINISHED", {}
                # A configuration the trial passed gets its own epochs; the trial's later epochs are not its.
                rows = [(int(r["epoch"]), _values_for(r, epochs)) for r in records if int(r["epoch"]) <= epochs]
                self.writer.reconcile(run_id, config, rows, status, state, tags,
                                      created_tags=self._trained_by(trial, run_id))
                self._recorded_extras(run_id, records)

    @staticmethod
    def _trained_by(trial, run_id: str) -> dict[str, str]:
        return {tracking.TAG_TRAINED_BY: trial.trial_id} if run_id != trial.trial_id else {}

    def _open(self, trial) -> list[tuple[str, dict[str, Any], int]]:
        """The configurations of ``trial`` whose runs are open (an unshared trial's run always counts)."""
        return [c for c in configurations(trial.trial_id, trial.config)
                if c[0] == trial.trial_id or self.writer.is_open(c[0])]

    def on_trial_start(self, iteration, trials, trial, **info):
        """A run per configuration the trial completes (one unless shared): a (re)started shared trial reopens the
        runs of the configurations it has not passed yet."""
        if not self._mine(trial):
            return
        path = getattr(trial, "path", None)
        if path and "://" not in path:  # its resolved configuration beside its results (local storage)
            try:
                write_trial_config(path, trial.config, self.settings)
            except OSError as err:  # a full or vanished results folder: the search stops, saying why
                if self.stop is None or not (cause := systemic_cause(str(err))):
                    raise
                self.stop.fail(cause, f"{type(err).__name__}: {err}")
        reached = int((trial.last_result or {}).get("epoch", 0) or 0)
        for run_id, config, epochs in configurations(trial.trial_id, trial.config):
            if epochs > reached or run_id == trial.trial_id:
                self.writer.start(run_id, config, self._trained_by(trial, run_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not self._mine(trial):
            return
        node = result.get("node_id")
        epoch = int(result.get("epoch", result.get("training_iteration", 0)))
        if result.get(RESTORED_RECORDS):
            self._backfill(trial, json.loads(result[RESTORED_RECORDS]))
        self._started_over(trial, epoch, result)
        for run_id, _, epochs in self._open(trial):
            if node and self._nodes.get(run_id) != node:
                self._nodes[run_id] = node
                self.writer.set_tags(run_id, {tracking.TAG_NODE: node})
            if result.get("restore_note"):
                self.writer.set_tags(run_id, {tracking.TAG_RESTORED_FROM: result["restore_note"]})
            if result.get(DATASETS):  # once a trial process: the splits it trains and is scored on
                self.writer.inputs(run_id, json.loads(result[DATASETS]))
            if epoch > epochs:
                continue
            self.writer.metrics(run_id, epoch, _values_for(result, epochs))
            if epoch == epochs and run_id != trial.trial_id:  # a shorter configuration of a shared trial ends here
                self.writer.end(run_id, TrialStatus.FINISHED, "FINISHED")
                self._nodes.pop(run_id, None)

    def _started_over(self, trial, epoch: int, result: dict[str, Any]) -> None:
        """A shorter configuration of a shared trial whose run is not open though the trial reports one of its epochs:
        Tune restored the trial from an earlier point than its last result (a driver killed after the result, before
        the checkpoint was registered), so the trial trains those epochs again. Their records go where the run lacks
        them, and the configuration ends at its last epoch if an earlier driver left its run open."""
        for run_id, config, epochs in configurations(trial.trial_id, trial.config):
            if run_id != trial.trial_id and epoch <= epochs and not self.writer.is_open(run_id):
                status = TrialStatus.FINISHED if epoch == epochs else ""
                self.writer.backfill(run_id, config, [(epoch, _values_for(result, epochs))], status,
                                     self._trained_by(trial, run_id))

    def _backfill(self, trial, records: list[dict[str, Any]]) -> None:
        """A resumed trial's earlier epochs into its runs where an earlier driver did not write them; a configuration
        the trial had passed ends ``finished`` if that driver left its run open."""
        passed = max((int(r["epoch"]) for r in records), default=0)
        for run_id, config, epochs in configurations(trial.trial_id, trial.config):
            rows = [(int(r["epoch"]), _values_for(r, epochs)) for r in records if int(r["epoch"]) <= epochs]
            if run_id != trial.trial_id and epochs <= passed:
                self.writer.backfill(run_id, config, rows, TrialStatus.FINISHED, self._trained_by(trial, run_id))
                if self.writer.is_open(run_id):
                    self.writer.end(run_id, TrialStatus.FINISHED, "FINISHED")
            elif rows:
                self.writer.backfill(run_id, config, rows, tags=self._trained_by(trial, run_id))

    def _recorded_extras(self, run_id: str, records: list[dict[str, Any]]) -> None:
        """What a run written again from Ray's record of a trial (a resumed search whose driver, or store, lost the
        writes) keeps besides its metrics: the dataset inputs its first report carried and the node it ran on."""
        for record in records:
            if record.get(DATASETS):
                self.writer.inputs(run_id, json.loads(record[DATASETS]))
        node = next((r["node_id"] for r in reversed(records) if r.get("node_id")), None)
        if node:
            self.writer.set_tags(run_id, {tracking.TAG_NODE: node})

    def on_trial_complete(self, iteration, trials, trial, **info):
        if not self._mine(trial):
            return
        last = int((trial.last_result or {}).get("epoch", 0))
        by_scheduler = self.stop is None or not self.stop.reason or trial.trial_id in STOPPED_EARLY
        for run_id, config, _ in self._open(trial):
            status = tracking.ended_status(config, last, by_scheduler)
            extra = {"istar_tune.stopped_after_epoch": str(last)} if status == TrialStatus.STOPPED_EARLY else {}
            self.writer.end(run_id, status, "KILLED" if status == TrialStatus.INTERRUPTED else "FINISHED", extra)
            self._nodes.pop(run_id, None)

    def on_trial_recover(self, iteration, trials, trial, **info):
        if not self._mine(trial):
            return
        for run_id, _, _ in self._open(trial):
            self.writer.set_tags(run_id, {"istar_tune.retries": str(getattr(trial, "num_failures", ""))})
        error = tracking.trial_error_text(trial)
        if self.stop is not None and (cause := systemic_cause(error)):
            self.stop.fail(cause, error)  # no retry fixes the machine: the search stops at this first failure

    def on_trial_error(self, iteration, trials, trial, **info):
        if not self._mine(trial):
            return
        error = tracking.trial_error_text(trial)
        cause = systemic_cause(error)  # the machine failed, not the configuration: the trial was interrupted
        status, state = (TrialStatus.INTERRUPTED, "KILLED") if cause else (TrialStatus.FAILED, "FAILED")
        described = failed_datasets(trial)  # a trial that failed before its first report: what it had read
        for run_id, _, _ in self._open(trial):
            if described:
                self.writer.inputs(run_id, described)
            self.writer.end(run_id, status, state, {tracking.TAG_ERROR: error})
            self._nodes.pop(run_id, None)
        if self.stop is not None and cause:
            self.stop.fail(cause, error)

    def on_step_end(self, iteration, trials, **info):
        if self.stop is not None and self._writer is not None and self._writer.errors:
            seen = self._writer.errors[-1]
            self.stop.fail(systemic_cause(seen) or "the tracking store is gone", seen)

    def on_experiment_end(self, trials, **info):
        self._reconcile(trials)
        known = {run_id for trial in trials for run_id, _, _ in configurations(trial.trial_id, trial.config)}
        lost = self.writer.end_unknown(known, TrialStatus.INTERRUPTED, "KILLED", {tracking.TAG_ERROR: LOST})
        if lost:
            log.warning("%d MLflow run(s) of an earlier driver ended as interrupted: Tune's saved state did not hold "
                        "their trials when the search resumed (tag %s)", len(lost), tracking.TAG_ERROR)
        self.writer.flush()

    def interrupt(self, reason: str) -> None:
        """Mark every trial that started and did not end as KILLED (status ``interrupted``)."""
        for trial_id in self.writer.open_trials():
            self.writer.end(trial_id, TrialStatus.INTERRUPTED, "KILLED", {tracking.TAG_ERROR: reason})

    def close(self, timeout: float | None = None) -> bool:
        return self.writer.close(timeout)


def reported_epochs(trial) -> list[dict[str, Any]]:
    """The epochs a trial reported, in order, as Ray's result file in its folder holds them (the last report of an
    epoch a restored trial reported twice); [] where that file cannot be read. What reconciles a run whose writes a
    killed driver lost: Ray's logger writes the file as each result arrives, MLflow's writer a moment later."""
    import pyarrow.fs
    from ray.tune.result import EXPR_RESULT_FILE

    storage = trial.storage
    places = [(lambda: storage.storage_filesystem, lambda: storage.trial_fs_path),
              (pyarrow.fs.LocalFileSystem, lambda: storage.trial_driver_staging_path)]
    for filesystem, folder in places:
        try:
            with filesystem().open_input_stream(f"{folder()}/{EXPR_RESULT_FILE}") as stream:
                lines = stream.read().decode("utf-8").splitlines()
        except (OSError, ValueError, AssertionError):  # not written there (yet), storage that cannot be reached, or
            continue  # the driver's staging folder of a search summarised without Ray (a session's folder)
        by_epoch: dict[int, dict[str, Any]] = {}
        for line in lines:
            try:
                result = json.loads(line)
            except ValueError:  # a line cut short by the kill
                continue
            if isinstance(result, dict) and int(result.get("epoch", 0) or 0) > 0:
                by_epoch[int(result["epoch"])] = result
        if by_epoch:
            return [by_epoch[e] for e in sorted(by_epoch)]
    return []


def _values_for(result: dict[str, Any], epochs: int) -> dict[str, Any]:
    """What the run of a configuration with ``epochs`` epochs logs of an epoch's result: not a shared trial's
    per-configuration objectives, nor, before its own last epoch, what was measured only for a shorter
    configuration ending there."""
    drop = set(str(result.get(CLOSING_ONLY, "")).split(",")) - {""} if int(result.get("epoch", 0)) < epochs else set()
    return {k: v for k, v in result.items() if k not in drop and not k.startswith((OBJECTIVE_AT, DEV_OBJECTIVE_AT))}


class ProgressPrinter(Callback):
    """A line when a trial starts (naming its configuration), per reported epoch in small searches, and when it
    ends, each with the configuration's words (:func:`istar_tune.tracking.run_name`); picklable. Within a long
    epoch the trial itself prints a heartbeat (:meth:`istar_tune.search.tune.trainable.TuneReporter.heartbeat`)."""

    EPOCH_LINES_UP_TO = 64
    """Searches with more trials than this print only started and finished trials."""

    def __init__(self, total: int, write: Callable[[str], None] | None = None):
        self.total = total
        self.done = 0
        self.write = write or say
        self.counted = False

    def on_step_begin(self, iteration, trials, **info):
        """Once: a resumed search's count goes on from the trials that ended before it (Tune restored them ended)."""
        if not self.counted:
            self.counted = True
            self.done = sum(t.status in ("TERMINATED", "ERROR") for t in trials)

    def on_trial_start(self, iteration, trials, trial, **info):
        again = " again" if "epoch" in (trial.last_result or {}) else ""
        self.write(f"  trial {trial.trial_id} started{again}: {tracking.run_name(trial.config)}")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.total > self.EPOCH_LINES_UP_TO or "epoch" not in result:
            return
        metric = trial_task(trial.config).metric
        self.write(f"  trial {trial.trial_id} epoch {result.get('epoch')}/{trial_epochs(trial.config)}: {metric} "
                   f"{result.get(metric, float('nan')):.4f} ({result.get('epoch_time_s', 0):.0f} s) — "
                   f"{tracking.run_name(trial.config)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        config: dict[str, Any] = trial.config
        metric = trial_task(config).metric
        value = (trial.last_result or {}).get(metric)
        shown = f"{metric} {value:.4f} — " if isinstance(value, float) else ""
        self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} done: {shown}{tracking.run_name(config)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        error = tracking.trial_error_text(trial)
        said = f"INTERRUPTED ({cause})" if (cause := systemic_cause(error)) else f"FAILED: {error}"
        self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} {said} — {tracking.run_name(trial.config)}")

    def on_trial_recover(self, iteration, trials, trial, **info):
        """A retry says nothing, except where the machine failed: the search stops there, and this says where."""
        if cause := systemic_cause(tracking.trial_error_text(trial)):
            self.done += 1
            self.write(f"[{self.done}/{self.total}] trial {trial.trial_id} INTERRUPTED ({cause}) — "
                       f"{tracking.run_name(trial.config)}")


class TrialStatuses(Callback):
    """Each Tune trial's last status (``TERMINATED``, ``ERROR``, ...), for the summary: a trial's results alone do
    not say how it ended. Kept as Tune reports trials ending, and whole when the experiment ends."""

    def __init__(self) -> None:
        self.statuses: dict[str, str] = {}
        self.trials: list = []

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        self.statuses[trial.trial_id] = trial.status

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self.statuses[trial.trial_id] = trial.status

    def on_experiment_end(self, trials: list, **info) -> None:
        self.statuses.update({t.trial_id: t.status for t in trials})
        self.trials = list(trials)

    def results(self) -> list[SimpleNamespace]:
        """Each trial of the ended experiment as Tune's ``ResultGrid`` gives it (config, metrics, path, error), read
        leniently: for when Tune cannot read its own results back (an error file a full disk cut short)."""
        return [SimpleNamespace(config=t.config, metrics={"trial_id": t.trial_id, **(t.last_result or {})},
                                path=getattr(t, "path", None),
                                error=RuntimeError(tracking.trial_error_text(t)) if t.status == "ERROR" else None)
                for t in self.trials]
