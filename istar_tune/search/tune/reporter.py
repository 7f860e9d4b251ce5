"""What a trial reports to Tune: :class:`TuneReporter` (each epoch's record with its objective and a checkpoint,
the heartbeat within an epoch) and the result keys the driver's callbacks, the searcher and the summary read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.console import say
from istar_tune.metrics import choosing_score, chosen_on, score
from istar_tune.search.tune import checkpoints
from istar_tune.tasks import Task

OBJECTIVE = "objective"
"""Every trial reports its task's selection metric under this key too, so one searcher/scheduler setting fits every
task (accuracy, mcc, pearson or f1): the value that chooses (``metrics.choosing_score``): with held-out data the best
held-out value so far (the dev value at that epoch is reported beside it as :data:`DEV_OBJECTIVE` and chooses
nothing), else the dev metric after the epoch."""
OBJECTIVE_AT = "objective_at_epoch_"
"""Prefix of a shared trial's result keys: the objective of the configuration with that many epochs."""
DEV_OBJECTIVE = "dev_objective"
"""With held-out data: the dev value of the epoch the held-out data chose so far, reported beside the objective (it
chooses nothing); a shared trial's ``dev_objective_at_epoch_<k>`` are those of its configurations."""
DEV_OBJECTIVE_AT = "dev_objective_at_epoch_"
"""Prefix of a shared trial's result keys: the dev value of the configuration with that many epochs."""
RESTORED_RECORDS = "restored_records"
"""Result key of the records (JSON) of the epochs a resumed trial had reported before it was stopped."""
RESTORE_NOTE = "restore_note"
"""Result key of the note a trial reports when it resumed from an older checkpoint than Tune gave it."""
DATASETS = "datasets"
"""Result key of a trial's tokenised splits, described once a process (JSON)."""


class TuneReporter:
    """Reports each epoch to Tune with a checkpoint (none with ``checkpoint: none``), keeping the newest ``keep``.

    A shared trial (``completes``: the epoch counts of the configurations it completes) also reports, with every
    epoch, the objective each configuration ended with so far (``objective_at_epoch_<k>``): its last result then
    holds every configuration's score, also after a resume (:meth:`remember`)."""

    def __init__(self, metric: str, keep: int = 1, wants_checkpoint: bool = True, note: str = "",
                 completes: tuple[int, ...] = (), label: str = "", epochs: int = 0, heartbeat_s: float = 0.0):
        self.metric = metric
        self.label, self.epochs, self.heartbeat_s = label, epochs, heartbeat_s
        """``<trial id> — <its configuration's words>``, the epochs it reports, the seconds between heartbeats."""
        self._beat: tuple[int, float, float] = (0, 0.0, 0.0)  # epoch, its first batch's end, the last line
        self.keep = keep
        self.wants_checkpoint = wants_checkpoint
        self.note = note
        self.completes = set(completes) if len(completes) > 1 else set()
        self.closed: dict[int, float] = {}
        self.closed_dev: dict[int, float] = {}
        self.restored: list[dict[str, Any]] = []
        self.datasets = ""
        """The tokenised splits described (JSON), sent once with the next report (:data:`DATASETS`)."""

    def data_read(self, task: Task, data) -> None:
        """The trial's tokenised splits, described for MLflow's dataset inputs (:mod:`istar_tune.tracking.datasets`)."""
        described = tracking.describe_datasets(task, data)
        self.datasets = json.dumps(described)
        import ray

        if ray.is_initialized():  # a trial: recorded now, in storage (one killed before its first report says it)
            checkpoints.write_read_record({DATASETS: described, "node_id": ray.get_runtime_context().get_node_id()})

    def heartbeat(self, epoch: int, done: int, total: int, write: Callable[[str], None] | None = None) -> None:
        """Every ``heartbeat_s`` seconds of an epoch, one line: batches done, their rate and the time left (a trial's
        output reaches the search's terminal through Ray)."""
        now = time.monotonic()
        if epoch != self._beat[0]:
            self._beat = (epoch, now, now)
            return
        if not self.heartbeat_s or now - self._beat[2] < self.heartbeat_s:
            return
        self._beat = (epoch, self._beat[1], now)
        rate = (done - 1) / max(now - self._beat[1], 1e-9)
        left = (total - done) / rate if rate else float("nan")
        trial, _, name = self.label.partition(" — ")
        (write or say)(f"  trial {trial} epoch {epoch}/{self.epochs}: batch {done}/{total} ({rate:.3g} batches/s, "
                          f"about {left:.0f} s left of the epoch) — {name}")

    def remember(self, records: list[dict[str, Any]]) -> None:
        """The records of the epochs a resumed trial had reported before: its first report hands them on again
        (``restored_records``), so epochs a killed driver never wrote to MLflow are written then."""
        for record in records:
            if record.get("epoch") in self.completes:
                self._close(record)
        self.restored = [{**r, **self.objectives(r)} for r in records]

    def objectives(self, record: dict[str, Any]) -> dict[str, float]:
        """The objective of an epoch's record and, with held-out data, the dev value beside it."""
        values = {OBJECTIVE: choosing_score(record, self.metric)}
        if chosen_on(record, self.metric) == "holdout" and score(record, self.metric) is not None:
            values[DEV_OBJECTIVE] = score(record, self.metric)
        return values

    def _close(self, record: dict[str, Any], values: dict[str, float] | None = None) -> None:
        values = values or self.objectives(record)
        self.closed[int(record["epoch"])] = values[OBJECTIVE]
        if DEV_OBJECTIVE in values:
            self.closed_dev[int(record["epoch"])] = values[DEV_OBJECTIVE]

    def closing(self, record: dict[str, Any]) -> dict[str, float]:
        """An epoch's :meth:`objectives` and, for a shared trial, those of each configuration it has completed so far
        (this epoch's own included where one ends here)."""
        objectives = self.objectives(record)
        if record.get("epoch") in self.completes:
            self._close(record, objectives)
        return {**objectives, **self.completed()}

    def completed(self) -> dict[str, float]:
        """A shared trial's completed configurations' objectives (and dev values), by their result keys."""
        return {**{f"{OBJECTIVE_AT}{k}": v for k, v in sorted(self.closed.items())},
                **{f"{DEV_OBJECTIVE_AT}{k}": v for k, v in sorted(self.closed_dev.items())}}

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None:
        import ray
        from ray import tune

        metrics = {**record, **self.closing(record), "node_id": ray.get_runtime_context().get_node_id()}
        if checkpoint_dir is not None:
            metrics["checkpoint_bytes"] = sum(f.stat().st_size for f in Path(checkpoint_dir).rglob("*") if f.is_file())
        if self.note:  # a resume that had to fall back to an older checkpoint says so once, in its MLflow run
            metrics[RESTORE_NOTE], self.note = self.note, ""
        if self.datasets:  # once a process: what it trains and is scored on
            metrics[DATASETS], self.datasets = self.datasets, ""
        if self.restored:  # once, after a resume (JSON: one string value, whatever the records hold)
            metrics[RESTORED_RECORDS], self.restored = json.dumps(self.restored, default=float), []
        checkpoint = tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
        tune.report(metrics, checkpoint=checkpoint)
        if checkpoint is not None:
            checkpoints.prune(self.keep)
