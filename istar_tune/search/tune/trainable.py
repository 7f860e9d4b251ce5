"""The trial: a plain function of its sampled configuration that fine-tunes it
(:func:`istar_tune.training.loop.train`), resuming from its newest readable checkpoint, and the reporter every trial
(real or simulated) hands its epochs to.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from istar_tune import tracking
from istar_tune.config import Hyperparameters, RunSettings, from_dict, trial_epochs
from istar_tune.console import say
from istar_tune.metrics import choosing_score, chosen_on, score
from istar_tune.search.tune import checkpoints
from istar_tune.tasks import Task
from istar_tune.trial_config import (
    SHARED_EPOCHS_KEY,
    completes,
    configuration,
    for_search,
    hyperparameters,
    trial_task,
)

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


# ---------------------------------------------------------------------------------------------- the trial


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
        self.datasets = json.dumps(tracking.describe_datasets(task, data))

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

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None:
        import ray
        from ray import tune

        objectives = self.objectives(record)
        if record.get("epoch") in self.completes:
            self._close(record, objectives)
        metrics = {**record, **objectives, "node_id": ray.get_runtime_context().get_node_id(),
                   **{f"{OBJECTIVE_AT}{k}": v for k, v in sorted(self.closed.items())},
                   **{f"{DEV_OBJECTIVE_AT}{k}": v for k, v in sorted(self.closed_dev.items())}}
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


def configurations(trial_id: str, config: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    """``(id, configuration, epochs)`` of each configuration a trial completes: the trial itself, or for a shared
    trial one per epoch count (id ``<trial id>-e<k>``; each gets its own MLflow run)."""
    if not config.get(SHARED_EPOCHS_KEY):
        return [(trial_id, config, int(config.get("epochs", Hyperparameters.epochs)))]
    return [(f"{trial_id}-e{k}", configuration(config, k), k) for k in completes(config)]


def dev_values(config: dict[str, Any], result: dict[str, Any] | None) -> dict[int, float]:
    """With held-out data: the dev value (chooses nothing) of each configuration of a trial by its epochs, from its
    last result (empty without held-out data)."""
    result = result or {}
    last, dev = int(result.get("epoch", 0) or 0), result.get(DEV_OBJECTIVE)
    if not config.get(SHARED_EPOCHS_KEY):
        return {} if dev is None else {int(config.get("epochs", Hyperparameters.epochs)): dev}
    found = {k: result.get(f"{DEV_OBJECTIVE_AT}{k}", dev) if k <= last else dev for k in completes(config)}
    return {k: v for k, v in found.items() if v is not None}


def configuration_results(trial_id: str, config: dict[str, Any], result: dict[str, Any] | None
                          ) -> list[tuple[str, dict[str, Any], float | None, int, bool]]:
    """``(id, configuration, objective, last epoch, passed)`` of each configuration of a trial, from its last
    result. ``passed``: a shared trial completed it on its way (whatever happened to the trial later); it ended with
    the objective it reported at its last epoch. One the trial did not pass ends where the trial ended, with its last
    objective (as an unshared trial stopped there)."""
    result = result or {}
    last, objective = int(result.get("epoch", 0) or 0), result.get(OBJECTIVE)
    if not config.get(SHARED_EPOCHS_KEY):
        return [(trial_id, config, objective, last, False)]
    return [(cid, cfg, result.get(f"{OBJECTIVE_AT}{k}", objective) if k <= last else objective, min(k, last),
             k <= last) for cid, cfg, k in configurations(trial_id, config)]


RESTORED_RECORDS = "restored_records"
"""Result key of the records (JSON) of the epochs a resumed trial had reported before it was stopped."""
RESTORE_NOTE = "restore_note"
"""Result key of the note a trial reports when it resumed from an older checkpoint than Tune gave it."""
DATASETS = "datasets"
"""Result key of a trial's tokenised splits, described once a process (JSON)."""
FAILED_DATASETS = "istar_tune_datasets"
"""Attribute of the error of a trial that failed before its first report: its splits, described (JSON), which Ray
carries to the driver with the error (:func:`failed_datasets`), so its FAILED run still says what it trained on."""


def failed_datasets(trial) -> list[dict[str, Any]]:
    """The splits a failed trial had read before it failed, from the error Ray keeps on the driver; [] where its
    error holds none (it failed before reading its data, or after its first report)."""
    import pickle

    import ray.cloudpickle

    path = getattr(trial, "pickled_error_file", None)
    if not path:
        return []
    try:
        with open(path, "rb") as f:
            error = ray.cloudpickle.load(f)
    except (OSError, ValueError, EOFError, AttributeError, ImportError, pickle.UnpicklingError):
        return []
    described = getattr(getattr(error, "cause", error), FAILED_DATASETS, None) or getattr(error, FAILED_DATASETS, "")
    return json.loads(described) if described else []


def quiet_ray_loggers() -> None:
    """Ray's per-checkpoint info lines of every trial would drown the search's progress lines."""
    for name in ("ray.train", "ray.tune"):
        logging.getLogger(name).setLevel(logging.WARNING)


def trainable(config: dict[str, Any], settings: dict[str, dict[str, Any]], keep: dict[str, int]) -> None:
    """The Ray Tune trainable: a plain function of the sampled config (plus the fixed run settings and checkpoints
    to keep of each search in the experiment, by search name)."""
    import ray
    from ray import tune

    from istar_tune.training.memory import cap_gpu_memory, out_of_memory_explained, trial_shape

    quiet_ray_loggers()
    task = trial_task(config)  # a task that is not shipped: from the definition the config carries
    hparams = hyperparameters(config)
    run_settings = from_dict(RunSettings, for_search(config, settings), source="settings")
    shared = completes(config)  # its own epochs alone unless shared
    reporter = TuneReporter(task.metric, for_search(config, keep), run_settings.checkpoint != "none",
                            completes=shared, epochs=trial_epochs(config), heartbeat_s=run_settings.heartbeat_s,
                            label=f"{tune.get_context().get_trial_id()} — {tracking.run_name(config)}")
    share = ray.get_runtime_context().get_assigned_resources().get("GPU")
    cap_gpu_memory(share)  # co-located trials: each within its share of the GPU's memory
    what = trial_shape(hparams.model, hparams.task, hparams.method, hparams.batch_size, run_settings.max_length)
    try:
        with out_of_memory_explained(what, share):
            _train(hparams, task, run_settings, reporter, shared)
    except Exception as err:
        if reporter.datasets:  # failed before its first report: the splits it read travel with its error
            setattr(err, FAILED_DATASETS, reporter.datasets)
        raise


def _train(hparams: Hyperparameters, task: Task, run_settings: RunSettings, reporter: TuneReporter,
           shared: tuple[int, ...]):
    """The trial's training, from its newest readable checkpoint when Tune restored one."""
    from ray import tune

    from istar_tune.training.loop import train
    from istar_tune.training.sigma import SIGMA_CACHE
    from istar_tune.training.state import read_state

    # Σ_S of the pretrained model, shared by the trials of this node's experiment folder that have the same key.
    cache = Path(tune.get_context().get_trial_dir()).parent / SIGMA_CACHE
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        train(hparams, run_settings, reporter, completes=shared, sigma_cache=cache, task=task)
        return
    with tempfile.TemporaryDirectory(prefix="istar-tune-resume-") as local:
        def copy(folder: Path) -> Path:
            state = read_state(folder)  # a missing or truncated state fails here, and an older checkpoint is tried
            shutil.copytree(folder, local, dirs_exist_ok=True)
            reporter.remember(state.get("records", []))
            return Path(local)

        state_dir, reporter.note = checkpoints.restore(checkpoint, copy)
        train(hparams, run_settings, reporter, resume_from=state_dir, completes=shared, sigma_cache=cache, task=task)


TRIAL_CONFIG = "config.yaml"
"""A trial folder's resolved configuration, in the form ``istar-tune train --config`` reads."""
def write_trial_config(folder: str | Path, config: dict[str, Any], settings: dict[str, Any]) -> None:
    """A trial folder's ``config.yaml``: its resolved configuration (:func:`istar_tune.tracking.train_config`)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / TRIAL_CONFIG).write_text(
        yaml.safe_dump(tracking.train_config(config, settings), sort_keys=False, allow_unicode=True), "utf-8")
