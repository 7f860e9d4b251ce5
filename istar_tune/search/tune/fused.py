"""A fused trial (``search.fuse``): the configurations under :data:`~istar_tune.trial_config.FUSED_KEY` trained as one
bundle (:func:`istar_tune.training.bundle.train_bundle`) in one Tune trial, each member a run of its own.

Each member reports to a :class:`~istar_tune.search.tune.reporter.TuneReporter` of its own (its objectives, its
restored records), through :class:`BundleReporter`, which sends Tune one result an epoch: each member's values under
``m<i>/`` (:func:`member_view` reads a member's back) and one checkpoint folder with each member's newest state under
``m<i>/``. A member that failed leaves its error there too, so a resumed bundle reports it failed and does not train
it again; a member that had finished resumes finished. Each member's run is ``<trial id>-m<i>``.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

from istar_tune.search.tune.reporter import (
    DATASETS,
    OBJECTIVE,
    RESTORE_NOTE,
    RESTORED_RECORDS,
    TuneReporter,
)
from istar_tune.trial_config import completes, members

REACHED = "reached"
"""A member's key (``m<i>/reached``): the last epoch it reported, in every result from then on."""
ERROR = "error"
"""A member's key (``m<i>/error``): why it left the bundle (it ended FAILED), in every result from then on."""
FAILED_FILE = "failed.txt"
"""In a member's checkpoint folder: the error it failed with."""
_MEMBER_KEY = re.compile(r"^m(\d+)/(.+)$")
_MEMBER_RUN = re.compile(r"^(.+)-m(\d+)(-e\d+)?$")


def member_index(run_id: str) -> int | None:
    """The member a run id names (``<trial id>-m<i>``, or ``<trial id>-m<i>-e<k>``: a configuration a shared member
    completes), else ``None``."""
    match = _MEMBER_RUN.match(run_id)
    return int(match.group(2)) if match else None


def member_last(result: dict[str, Any] | None, index: int) -> dict[str, Any]:
    """Member ``index``'s part of a fused trial's last result as an unfused trial's last result reads: its last
    epoch, its objectives (a shared member's per configuration too) and its error, under their own keys."""
    prefix = f"m{index}/"
    own = {k[len(prefix):]: v for k, v in (result or {}).items() if k.startswith(prefix)}
    return {**own, "epoch": int(own.get(REACHED, 0) or 0)}


def member_view(result: dict[str, Any], index: int) -> dict[str, Any] | None:
    """What member ``index``'s run reads of a fused trial's result, as an unfused trial's result reads: the trial's
    own keys (node, datasets, times) with the member's epoch record where it reported this epoch; ``{error: ...}``
    where it has failed; ``None`` where it rests (its epochs ended, or it has not begun)."""
    own, shared = {}, {}
    for key, value in result.items():
        match = _MEMBER_KEY.match(key)
        if match is None:
            shared[key] = value
        elif int(match.group(1)) == index:
            own[match.group(2)] = value
    if own.get(ERROR):
        return {ERROR: own[ERROR]}
    if "epoch" not in own or int(own["epoch"]) != int(result.get("epoch", 0) or 0):
        return None
    return {**shared, **{k: v for k, v in own.items() if k not in (REACHED, RESTORED_RECORDS)}}


def member_ended(result: dict[str, Any] | None, index: int) -> tuple[float | None, int, str]:
    """(objective, last epoch, error) of member ``index`` as a fused trial's last result carries them."""
    result = result or {}
    prefix = f"m{index}/"
    return (result.get(prefix + OBJECTIVE), int(result.get(prefix + REACHED, 0) or 0), result.get(prefix + ERROR) or "")


def member_restored(result: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The records member ``index`` had reported before its trial resumed, as its first result after carries them."""
    text = result.get(f"m{index}/{RESTORED_RECORDS}")
    return json.loads(text) if text else []


class MemberReporter:
    """What ``train_bundle`` hands one member: its records and checkpoints go to the bundle's next result."""

    def __init__(self, bundle: BundleReporter, index: int):
        self.bundle, self.index = bundle, index
        self.wants_checkpoint = bundle.reporters[index].wants_checkpoint

    def data_read(self, task, data) -> None:
        if not self.bundle.datasets:
            self.bundle.reporters[self.index].data_read(task, data)
            self.bundle.datasets = self.bundle.reporters[self.index].datasets

    def heartbeat(self, epoch: int, done: int, total: int) -> None:
        self.bundle.reporters[self.index].heartbeat(epoch, done, total)

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None:
        self.bundle.pending[self.index] = record
        if checkpoint_dir is not None:  # the member's newest state replaces its last one in the bundle's folder
            folder = self.bundle.folder / f"m{self.index}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for item in Path(checkpoint_dir).iterdir():
                shutil.move(str(item), folder / item.name)


class BundleReporter:
    """The members' reporters (one :class:`TuneReporter` each, by member index) as one Tune trial's: after each of
    the bundle's epochs (:meth:`epoch_done`) one result and one checkpoint folder (``folder``: each member's newest
    state under ``m<i>/``)."""

    def __init__(self, reporters: list[TuneReporter], folder: Path, keep: int, note: str = ""):
        self.reporters, self.folder, self.keep, self.note = reporters, Path(folder), keep, note
        self.pending: dict[int, dict[str, Any]] = {}
        self.carried: dict[int, dict[str, Any]] = {}
        self.datasets = ""
        self.restored: dict[int, list[dict[str, Any]]] = {}

    def restore(self) -> tuple[dict[int, Path], dict[int, str]]:
        """Each member's state folder in ``folder`` (a resumed bundle's) and the errors of those that had failed;
        their earlier records are carried into the next result."""
        from istar_tune.training.state import read_state

        states, failed = {}, {}
        for index, reporter in enumerate(self.reporters):
            own = self.folder / f"m{index}"
            if (own / FAILED_FILE).is_file():
                failed[index] = (own / FAILED_FILE).read_text("utf-8")
                self.carried[index] = {ERROR: failed[index]}
            elif own.is_dir():
                records = read_state(own).get("records", [])
                reporter.remember(records)
                self.restored[index], reporter.restored = reporter.restored, []
                states[index] = own
                if records:
                    self.carried[index] = {REACHED: int(records[-1]["epoch"]), **reporter.objectives(records[-1]),
                                           **reporter.completed()}
        return states, failed

    def member(self, index: int) -> MemberReporter:
        return MemberReporter(self, index)

    def epoch_done(self, epoch: int, errors: dict[int, str]) -> None:
        """Report the epoch every member that trained it closed (and the errors of those that failed in it)."""
        import ray
        from ray import tune

        from istar_tune.search.tune import checkpoints

        metrics: dict[str, Any] = {"epoch": epoch, "node_id": ray.get_runtime_context().get_node_id()}
        for index, record in sorted(self.pending.items()):
            objectives = self.reporters[index].closing(record)  # a shared member's completed configurations too
            metrics.update({f"m{index}/{k}": v for k, v in {**record, **objectives}.items()})
            self.carried[index] = {REACHED: int(record["epoch"]), **objectives}
        for index, error in errors.items():
            self.carried.setdefault(index, {})[ERROR] = error
            (self.folder / f"m{index}").mkdir(parents=True, exist_ok=True)
            (self.folder / f"m{index}" / FAILED_FILE).write_text(error, "utf-8")
        for index, carried in self.carried.items():
            metrics.update({f"m{index}/{k}": v for k, v in carried.items()})
        scored = [c[OBJECTIVE] for c in self.carried.values() if c.get(OBJECTIVE) is not None]
        metrics[OBJECTIVE] = max(scored) if scored else math.nan  # the trial's: its best member's (chooses nothing)
        for index, records in self.restored.items():
            metrics[f"m{index}/{RESTORED_RECORDS}"] = json.dumps(records, default=float)
        self.restored = {}
        if self.datasets:
            metrics[DATASETS], self.datasets = self.datasets, ""
        if self.note:
            metrics[RESTORE_NOTE], self.note = self.note, ""
        self.pending = {}
        keeps = self.folder.is_dir() and any(self.folder.iterdir()) and self.reporters[0].wants_checkpoint
        if keeps:
            metrics["checkpoint_bytes"] = sum(f.stat().st_size for f in self.folder.rglob("*") if f.is_file())
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(self.folder)) if keeps else None)
        if keeps:
            checkpoints.prune(self.keep)


def train_fused(config: dict[str, Any], settings, keep: int, task) -> None:
    """A fused trial's training: its members as one bundle, from each one's state in the newest readable checkpoint
    when Tune restored one (a member that had failed stays failed and is not trained again)."""
    import tempfile

    from ray import tune

    from istar_tune import tracking
    from istar_tune.search.tune import checkpoints
    from istar_tune.training.bundle import train_bundle
    from istar_tune.training.memory import cap_gpu_memory, out_of_memory_explained, trial_shape
    from istar_tune.training.sigma import SIGMA_CACHE
    from istar_tune.trial_config import hyperparameters

    configs, trial_id = members(config), tune.get_context().get_trial_id()
    reporters = [TuneReporter(task.metric, keep, settings.checkpoint != "none", epochs=int(c.get("epochs", 0)),
                              completes=completes(c), heartbeat_s=settings.heartbeat_s,
                              label=f"{trial_id} — bundle of {len(configs)}: {tracking.run_name(configs[0])}, …")
                 for c in configs]
    cache = Path(tune.get_context().get_trial_dir()).parent / SIGMA_CACHE
    share = _gpu_share()
    cap_gpu_memory(share)
    hparams = [hyperparameters(c) for c in configs]
    what = trial_shape(hparams[0].model, hparams[0].task, f"bundle of {len(configs)}", hparams[0].batch_size,
                       settings.max_length)
    with tempfile.TemporaryDirectory(prefix="istar-tune-bundle-") as folder:
        bundle = BundleReporter(reporters, Path(folder), keep)

        def copy(source: Path) -> tuple[dict[int, Path], dict[int, str]]:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(source, folder)
            bundle.carried, bundle.restored = {}, {}
            return bundle.restore()  # a member's unreadable state fails here, and an older checkpoint is tried

        checkpoint = tune.get_checkpoint()
        restored, bundle.note = checkpoints.restore(checkpoint, copy) if checkpoint is not None else (None, "")
        states, failed = restored or ({}, {})
        training = [i for i in range(len(configs)) if i not in failed]
        with out_of_memory_explained(what, share):
            train_bundle([hparams[i] for i in training], settings, [bundle.member(i) for i in training],
                         resume_from=[states.get(i) for i in training], sigma_cache=cache, task=task,
                         completes=[completes(configs[i]) for i in training],
                         epoch_done=lambda epoch, errors: bundle.epoch_done(
                             epoch, {training[k]: error for k, error in errors.items()}))
        if bundle.restored or bundle.note:  # every member had ended before the resume: its records still go on
            bundle.epoch_done(max((c.get(REACHED, 0) for c in bundle.carried.values()), default=0), {})


def _gpu_share() -> float | None:
    import ray

    return ray.get_runtime_context().get_assigned_resources().get("GPU")
