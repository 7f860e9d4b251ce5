"""The MLflow logger of a search's trials (the progress lines: :mod:`istar_tune.search.tune.progress`).

Both run in the Ray driver, on Tune's event loop, so they only hand work on: the logger queues every write for
:class:`istar_tune.tracking.RunWriter`'s thread, the printer writes a line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from ray.tune import Callback

from istar_tune import tracking
from istar_tune.metrics import CLOSING_ONLY
from istar_tune.search.stopping import Stop, systemic_cause
from istar_tune.search.tune.checkpoints import READ_RECORD
from istar_tune.search.tune.fused import ERROR, member_ended, member_index, member_restored, member_view
from istar_tune.search.tune.reporter import DATASETS, DEV_OBJECTIVE_AT, OBJECTIVE_AT, RESTORED_RECORDS
from istar_tune.search.tune.scheduler import STOPPED_EARLY
from istar_tune.search.tune.trainable import configurations, write_trial_config
from istar_tune.trial_config import SEARCH_KEY
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
                index, at = member_index(run_id), reached
                if index is not None:  # a fused trial's member: its own epochs and error
                    _, at, failed = member_ended(last, index)
                if epochs > at and (trial.status == Trial.ERROR or index is not None and failed):
                    error = {tracking.TAG_ERROR: failed if index is not None and failed else
                             tracking.trial_error_text(trial)}
                    status, state, tags = TrialStatus.FAILED, "FAILED", error
                else:
                    status, state, tags = tracking.ended_status(config, at), "FINISHED", {}
                # A configuration the trial passed gets its own epochs; the trial's later epochs are not its.
                seen = [_view(r, run_id) for r in records]
                rows = [(int(r["epoch"]), _values_for(r, epochs)) for r in seen
                        if r is not None and "epoch" in r and int(r["epoch"]) <= epochs]
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
            if (index := member_index(run_id)) is not None:  # a fused trial's member: where it ended, if it did
                _, reached, failed = member_ended(trial.last_result, index)
                reached = epochs if failed else reached
            if epochs > reached or run_id == trial.trial_id:
                self.writer.start(run_id, config, self._trained_by(trial, run_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not self._mine(trial):
            return
        node = result.get("node_id")
        epoch = int(result.get("epoch", result.get("training_iteration", 0)))
        if result.get(RESTORED_RECORDS):
            self._backfill(trial, json.loads(result[RESTORED_RECORDS]))
        self._backfill_members(trial, result)
        self._started_over(trial, epoch, result)
        for run_id, _, epochs in self._open(trial):
            values = _view(result, run_id)  # a fused trial's member: its own part (None: it rests this epoch)
            if values is None:
                continue
            if values.get(ERROR):  # a fused member that failed: it ends alone, with its error
                self.writer.end(run_id, TrialStatus.FAILED, "FAILED", {tracking.TAG_ERROR: values[ERROR]})
                continue
            if node and self._nodes.get(run_id) != node:
                self._nodes[run_id] = node
                self.writer.set_tags(run_id, {tracking.TAG_NODE: node})
            if values.get("restore_note"):
                self.writer.set_tags(run_id, {tracking.TAG_RESTORED_FROM: values["restore_note"]})
            if values.get(DATASETS):  # once a trial process: the splits it trains and is scored on
                self.writer.inputs(run_id, json.loads(values[DATASETS]))
            if epoch > epochs:
                continue
            self.writer.metrics(run_id, epoch, _values_for(values, epochs))
            if epoch == epochs and run_id != trial.trial_id:  # a shorter configuration or a member ends here
                self.writer.end(run_id, TrialStatus.FINISHED, "FINISHED")
                self._nodes.pop(run_id, None)

    def _started_over(self, trial, epoch: int, result: dict[str, Any]) -> None:
        """A shorter configuration of a shared trial whose run is not open though the trial reports one of its epochs:
        Tune restored the trial from an earlier point than its last result (a driver killed after the result, before
        the checkpoint was registered), so the trial trains those epochs again. Their records go where the run lacks
        them, and the configuration ends at its last epoch if an earlier driver left its run open."""
        for run_id, config, epochs in configurations(trial.trial_id, trial.config):
            if member_index(run_id) is not None:  # a fused trial's members carry their records on a resume
                return
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

    def _backfill_members(self, trial, result: dict[str, Any]) -> None:
        """A resumed fused trial's members' earlier epochs, as :meth:`_backfill` writes an unfused trial's; a member
        whose epochs they complete ends ``finished`` if an earlier driver left its run open."""
        for run_id, config, epochs in configurations(trial.trial_id, trial.config):
            index = member_index(run_id)
            records = member_restored(result, index) if index is not None else []
            if not records:
                continue
            rows = [(int(r["epoch"]), _values_for(r, epochs)) for r in records if int(r["epoch"]) <= epochs]
            done = max(e for e, _ in rows) >= epochs
            self.writer.backfill(run_id, config, rows, TrialStatus.FINISHED if done else "",
                                 self._trained_by(trial, run_id))
            if done and self.writer.is_open(run_id):
                self.writer.end(run_id, TrialStatus.FINISHED, "FINISHED")

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
            if (index := member_index(run_id)) is not None:  # a fused member stopped by its patience ends here
                last = member_ended(trial.last_result, index)[1]
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
        # A trial that ended before its first report (an error, a signal): what it read, from its record in storage.
        read = {} if getattr(trial, "has_reported_at_least_once", False) else read_record(trial)
        for run_id, _, _ in self._open(trial):
            if read.get(DATASETS):
                self.writer.inputs(run_id, read[DATASETS])
            if read.get("node_id") and self._nodes.get(run_id) != read["node_id"]:
                self.writer.set_tags(run_id, {tracking.TAG_NODE: read["node_id"]})
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


def _trial_files(trial, name: str) -> Iterator[bytes]:
    """A file of a trial's folder, as each place holds it: in storage, then in the driver's staging folder (none where
    it is not written there yet, the storage cannot be reached, or a search is summarised without Ray)."""
    import pyarrow.fs

    storage = getattr(trial, "storage", None)
    if storage is None:
        return
    places = [(lambda: storage.storage_filesystem, lambda: storage.trial_fs_path),
              (pyarrow.fs.LocalFileSystem, lambda: storage.trial_driver_staging_path)]
    for filesystem, folder in places:
        try:
            with filesystem().open_input_stream(f"{folder()}/{name}") as stream:
                yield stream.read()
        except (OSError, ValueError, AssertionError):
            continue


def read_record(trial) -> dict[str, Any]:
    """What a trial recorded reading (:data:`~istar_tune.search.tune.checkpoints.READ_RECORD`: its splits described,
    its node); {} where it recorded nothing (it ended before reading its data)."""
    text = next(_trial_files(trial, READ_RECORD), b"")
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def reported_epochs(trial) -> list[dict[str, Any]]:
    """The epochs a trial reported, in order, as Ray's result file in its folder holds them (the last report of an
    epoch a restored trial reported twice); [] where that file cannot be read. What reconciles a run whose writes a
    killed driver lost: Ray's logger writes the file as each result arrives, MLflow's writer a moment later."""
    from ray.tune.result import EXPR_RESULT_FILE

    for text in _trial_files(trial, EXPR_RESULT_FILE):
        by_epoch: dict[int, dict[str, Any]] = {}
        for line in text.decode("utf-8", "replace").splitlines():
            try:
                result = json.loads(line)
            except ValueError:  # a line cut short by the kill
                continue
            if isinstance(result, dict) and int(result.get("epoch", 0) or 0) > 0:
                by_epoch[int(result["epoch"])] = result
        if by_epoch:
            return [by_epoch[e] for e in sorted(by_epoch)]
    return []


def _view(result: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    """What run ``run_id`` reads of its trial's result: a fused trial's member its own part
    (:func:`~istar_tune.search.tune.fused.member_view`), any other run the whole result."""
    index = member_index(run_id)
    return result if index is None else member_view(result, index)


def _values_for(result: dict[str, Any], epochs: int) -> dict[str, Any]:
    """What the run of a configuration with ``epochs`` epochs logs of an epoch's result: not a shared trial's
    per-configuration objectives, nor, before its own last epoch, what was measured only for a shorter
    configuration ending there."""
    drop = set(str(result.get(CLOSING_ONLY, "")).split(",")) - {""} if int(result.get("epoch", 0)) < epochs else set()
    return {k: v for k, v in result.items() if k not in drop and not k.startswith((OBJECTIVE_AT, DEV_OBJECTIVE_AT))}
