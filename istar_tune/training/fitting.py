"""One run's fine-tuning stage, set up and closed epoch by epoch: what the plain path (``loop``) and a bundle
(``bundle``) share. :func:`begin_fit` builds the optimizer, schedule, checkpointer and selection and restores a resumed
run; after each epoch's training pass :func:`end_epoch` evaluates, draws Σ_S again where it is used, keeps the record,
follows the best epoch and reports with a checkpoint (:func:`close_epoch`, which every stage's epochs end with).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from istar_tune.methods import get_method
from istar_tune.metrics import CLOSING_ONLY, STAR_KEYS
from istar_tune.models import hidden_size
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.training.epoch import TRAIN_TOKENS
from istar_tune.training.evaluate import evaluate, evaluate_holdout
from istar_tune.training.graphs import stage_steps
from istar_tune.training.isolayer import IsoLayerResult
from istar_tune.training.run import Run, make_optimizer
from istar_tune.training.selection import Selection
from istar_tune.training.sigma import estimate_shrinkage, reused_shrinkage
from istar_tune.training.state import (
    BEST_CHECKPOINT,
    METRICS_FILE,
    STATE_FILE,
    Checkpointer,
    Reporter,
    Saved,
    report_epoch,
    save_pretrained,
    write_json_atomic,
)
from istar_tune.trial_status import TrialStatus

log = logging.getLogger(__name__)

SCHEDULED_LR = "scheduled_lr"
"""An epoch record's key of the optimizer's learning rate after its last step (the schedule's value; the
``learning_rate`` hyperparameter is the peak or constant rate)."""


@dataclass
class TrainResult:
    metric: str
    """The task's selection metric (``accuracy``, ``mcc``, ``pearson`` or ``f1``)."""
    epochs: list[dict[str, Any]]
    best_epoch: int
    status: str = TrialStatus.FINISHED
    second_stage: IsoLayerResult | None = None
    """What a method's second stage measured (IsoLayer: the sentence space before and after its layer trained)."""
    error: str = ""

    @property
    def final(self) -> dict[str, Any]:
        return self.epochs[-1] if self.epochs else {}

    @property
    def best(self) -> dict[str, Any]:
        return next((r for r in self.epochs if r["epoch"] == self.best_epoch), {})

    def as_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"error": self.error} if self.error else {}
        if self.second_stage is not None:
            extra["second_stage"] = dataclasses.asdict(self.second_stage)
        return {"status": self.status, "metric": self.metric, "best_epoch": self.best_epoch, "final": self.final,
                "best": self.best, "epochs": self.epochs, **extra}


@dataclass
class Fitting:
    """One run's fine-tuning stage as :func:`begin_fit` sets it up and :func:`end_epoch` closes each epoch of it:
    what the plain path (:func:`_fit`) and a bundle (:func:`istar_tune.training.bundle.train_bundle`) share."""

    run: Run
    result: TrainResult
    reporter: Reporter | None
    output_dir: Path | None
    completes: set[int]
    epochs: int
    """The stage's epochs (0: none, a second stage from a checkpoint)."""
    in_loss: bool
    """Σ_S is in the method's loss."""
    optimizer: Any
    scheduler: Any
    scaler: Any
    checkpointer: Checkpointer
    selection: Selection
    start: int
    """The last epoch trained before (a resumed run's)."""
    last: int
    """The last epoch to train here."""
    params: list[torch.nn.Parameter]
    stepper: Any
    shrinkage_cov: torch.Tensor | None


def begin_fit(run: Run, result: TrainResult, reporter: Reporter | None, resume_from, output_dir: Path | None,
              completes: set[int], sigma_cache: str | os.PathLike | None = None) -> Fitting | None:
    """The fine-tuning stage set up (optimizer, schedule, checkpointer, selection, a resumed run's state restored,
    the first Σ_S); ``None`` when a resumed state says the whole run had finished."""
    hp = run.hparams
    second_stage = get_method(hp.method).second_stage
    epochs = 0 if run.settings.init_checkpoint and second_stage else hp.epochs
    in_loss = get_method(hp.method).uses_zeta
    named = list(run.model.named_parameters())
    optimizer, scheduler, scaler = make_optimizer(run, named, hp.learning_rate, max(epochs, 1), hp.warmup_ratio)
    checkpointer = Checkpointer(run, optimizer, scheduler, scaler)
    selection = Selection(run, run.model)
    start, stopped, finished = _resumed(checkpointer, result, selection, resume_from, epochs)
    if finished:
        return None
    last = start if stopped else epochs
    # Σ_S of the model as it is now (draw `start`): it shrinks the first epoch trained here (I-STAR). After each
    # epoch one new draw from the updated model serves both that epoch's eval IsoScore* and the next epoch's
    # training; a method without Σ_S in its loss draws only where its eval IsoScore* is used (`measures_star`).
    stepper = stage_steps(run.step_mode, run.device)  # a graphed stage holds Σ_S where its graphs read it
    shrinkage_cov = stepper.own(_first_shrinkage(run, start, sigma_cache) if start < last and in_loss else None)
    return Fitting(run, result, reporter, output_dir, completes, epochs, in_loss, optimizer, scheduler, scaler,
                   checkpointer, selection, start, last, [p for _, p in named if p.requires_grad], stepper,
                   shrinkage_cov)


def end_epoch(fit: Fitting, epoch: int, losses: dict[str, Any], began: float,
              gathered: StreamingCovariance | None = None) -> bool:
    """After an epoch's training pass (its ``losses``, begun at ``began``): the held-out and dev evaluations, Σ_S
    drawn again where it is used, the record, the best epoch and the report with its checkpoint. True when
    ``patience`` stops the stage here."""
    run, selection = fit.run, fit.selection
    trained = time.perf_counter()
    losses = dict(losses)
    losses["train_tokens_per_s"] = losses.pop(TRAIN_TOKENS) / max(trained - began, 1e-9)
    held_out = evaluate_holdout(run) if selection.holdout else {}
    measured = fit.in_loss or measures_star(run, selection, epoch, held_out, fit.completes | {fit.epochs})
    if not measured:
        fit.shrinkage_cov = None
    else:
        new = estimate_shrinkage(run, draw=epoch) if gathered is None else gathered.covariance(torch.float32)
        fit.shrinkage_cov = fit.stepper.refreshed(fit.shrinkage_cov, new.to(run.device))
    estimated = time.perf_counter()
    metrics = {**evaluate(run, fit.shrinkage_cov), **held_out}
    ended = time.perf_counter()
    record = {"epoch": epoch, **metrics, **losses, SCHEDULED_LR: fit.scheduler.get_last_lr()[0],
              "shrinkage_time_s": estimated - trained, "train_time_s": trained - began,
              "eval_time_s": ended - estimated, "epoch_time_s": ended - began}
    if measured and not (fit.in_loss or selection.holdout or run.settings.isoscore_star_every_epoch
                         or epoch == fit.epochs):
        record[CLOSING_ONLY] = ",".join(STAR_KEYS)  # measured for the shorter configuration ending here
    stop, ends = close_epoch(run, fit.result, selection, record, fit.epochs, fit.output_dir,
                              lambda folder: save_pretrained(run, folder))
    if stop:
        log.info("no better held-out %s for %d epochs: fine-tuning ends after epoch %d, scored at epoch %d",
                 run.task.metric, run.settings.patience, epoch, selection.best[0])
    final = ends and not get_method(run.hparams.method).second_stage
    contents = ({"resume": "records", "weights": "weights"}.get(run.settings.checkpoint, "state") if final
                else "state")
    saved = Saved(epoch, fit.result.epochs, selection.best, contents, stopped=stop,
                  best_model=None if ends else selection.kept_unless(epoch), finished=final)
    report_epoch(fit.reporter, record, fit.checkpointer.writer(saved))
    return stop


def _first_shrinkage(run: Run, start: int, sigma_cache) -> torch.Tensor:
    """Σ_S of the model before the first epoch trained here: the pretrained model's is computed once per key and
    reused (:func:`~istar_tune.training.sigma.reused_shrinkage`); a resumed run's is drawn afresh."""
    if start == 0:
        return reused_shrinkage(run, sigma_cache, lambda: estimate_shrinkage(run, draw=0)).to(run.device)
    return estimate_shrinkage(run, draw=start).to(run.device)


def _resumed(checkpointer: Checkpointer, result: TrainResult, selection: Selection, resume_from,
             epochs: int) -> tuple[int, bool, bool]:
    """(the last epoch trained, whether fine-tuning had stopped, whether the run had finished) of a run resumed from
    the state in ``resume_from``, its records and best epoch restored; ``(0, False, False)`` without one."""
    if resume_from is None or not (Path(resume_from) / STATE_FILE).is_file():
        return 0, False, False
    state = checkpointer.load(Path(resume_from))
    if state["finished"]:
        result.epochs, result.best_epoch = state["records"], state["best"][0]
        return 0, False, True
    result.epochs = state["records"]
    selection.resume(state["best"], state.get("best_model"), state["epoch"])
    result.best_epoch = selection.best[0]
    log.info("resuming after epoch %d of %d", state["epoch"], epochs)
    return state["epoch"], state["stopped"], False


def training_pass_covariance(run: Run, selection: Selection, epoch: int, closing: set[int],
                             in_loss: bool) -> StreamingCovariance | None:
    """With ``star_sigma: training``, a method without Σ_S in its loss gathers the Σ_S of its eval IsoScore* from
    every training token of an epoch whose score may be used (:func:`measures_star`); ``None`` otherwise."""
    settings = run.settings
    if in_loss or settings.star_sigma != "training":
        return None
    if not (settings.isoscore_star_every_epoch or selection.holdout or epoch in closing):
        return None
    return StreamingCovariance(hidden_size(run.model), budget=2**62, device=run.device)


def measures_star(run: Run, selection: Selection, epoch: int, held_out: dict[str, float], closing: set[int]) -> bool:
    """Whether a method without Σ_S in its loss measures the eval IsoScore* (a Σ_S pass) after ``epoch``: where its
    value is used, the scored epoch of a configuration: with ``holdout`` each new best held-out epoch, else the last
    epoch of each configuration the run completes (``closing``); every epoch with ``isoscore_star_every_epoch``."""
    if run.settings.isoscore_star_every_epoch:
        return True
    if selection.holdout:
        return held_out[selection.key] > selection.best[1]
    return epoch in closing


def close_epoch(run: Run, result: TrainResult, selection: Selection, record: dict[str, Any], last: int,
                 output_dir: Path | None, save_best: Callable[[Path], None],
                 later_ties_win: bool = False) -> tuple[bool, bool]:
    """The bookkeeping every epoch of every stage ends with: keep the record, follow the best epoch (its checkpoint
    written by ``save_best`` into the output folder), add the scored epoch's measures, put the scored weights back
    when the stage ends and rewrite ``metrics.json``. Returns (stopped by ``patience``, the stage ends here).

    ``later_ties_win``: without ``holdout``, the best epoch is the best validation metric over every stage so far,
    the later one on a tie (IsoLayer's stage 2 against stage 1)."""
    epoch = record["epoch"]
    result.epochs.append(record)
    improved = selection.update(epoch, record)
    if later_ties_win and not selection.holdout:
        improved = record[run.task.metric] >= result.best.get(run.task.metric, -math.inf)
    if improved:
        result.best_epoch = epoch
        if output_dir is not None and run.settings.save_checkpoint:
            save_best(output_dir / BEST_CHECKPOINT)
    record.update(selection.scored(result.epochs))
    stop = selection.should_stop(epoch)
    ends = stop or epoch == last
    if ends:
        selection.restore()  # the scored epoch's weights go on: to the second stage, into the final checkpoint
    if output_dir is not None:
        write_json_atomic(output_dir / METRICS_FILE, result.as_json())
    return stop, ends
