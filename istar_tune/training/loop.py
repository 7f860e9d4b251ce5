"""The one training path for every method and task.

:func:`train` takes a run's :class:`~istar_tune.config.Hyperparameters` (what a search samples) and
:class:`~istar_tune.config.RunSettings`, fine-tunes, evaluates after every epoch and hands each epoch's record to
a reporter (the CLI prints it; a Ray trial reports it to Tune with a checkpoint). Methods differ only in the loss
(:func:`~istar_tune.training.epoch.method_loss`); a method with a second stage (IsoLayer) runs it through the same
epoch pass with its own loss and hook (``isolayer.py``), and every epoch of every stage ends with the same
bookkeeping (:func:`_close_epoch`).

Per epoch: the model trains with AdamW and the recipe's schedule (gradient accumulation, clipping, mixed precision on
CUDA with the penalty in float32) against a Σ_S estimated from up to ``shrinkage_tokens`` training tokens (no
gradient, streaming); then Σ_S is re-estimated from the updated model, and the validation set gives the task
metric(s) and the IsoScore* of its all-layer token cloud shrunk towards that Σ_S with ``eval_zeta``. A method
without Σ_S in its loss estimates it only after the epochs whose eval IsoScore* can be scored (:func:`measures_star`),
from a separate pass or, with ``star_sigma: training``, from its training pass.
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

import numpy as np
import torch
import yaml

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.methods import get_method
from istar_tune.metrics import CLOSING_ONLY, FINETUNED_PREFIX, STAR_KEYS
from istar_tune.models import hidden_size
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.tasks import Task
from istar_tune.training.epoch import TRAIN_TOKENS, method_loss, train_epoch
from istar_tune.training.evaluate import evaluate, evaluate_holdout
from istar_tune.training.forward import forward_pass
from istar_tune.training.graphs import stage_steps
from istar_tune.training.isolayer import IsoLayerHook, IsoLayerLoss, IsoLayerResult, SentenceSpace, sentence_space
from istar_tune.training.run import Run, make_optimizer, prepare
from istar_tune.training.selection import Selection
from istar_tune.training.sigma import estimate_shrinkage, reused_shrinkage, token_cloud
from istar_tune.training.state import (
    BEST_CHECKPOINT,
    CONFIG_FILE,
    ISOLAYER_FILE,
    METRICS_FILE,
    STATE_FILE,
    Checkpointer,
    Reporter,
    Saved,
    report_epoch,
    resolved_config,
    save_pretrained,
    write_json_atomic,
)
from istar_tune.training.usage import PEAK_MEMORY, UTILIZATION, DeviceUsage
from istar_tune.trial_status import TrialStatus

log = logging.getLogger(__name__)

MEASURED_KEYS = ("shrinkage_time_s", "train_time_s", "eval_time_s", "epoch_time_s", "train_tokens_per_s",
                 PEAK_MEMORY, UTILIZATION)
"""An epoch record's keys that measure the machine, not the run: they differ between two runs of one configuration."""

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


# ---------------------------------------------------------------------------------------------- the loop


def train(hparams: Hyperparameters, settings: RunSettings, reporter: Reporter | None = None,
          resume_from: str | os.PathLike | None = None, completes: tuple[int, ...] = (),
          sigma_cache: str | os.PathLike | None = None, task: Task | None = None) -> TrainResult:
    """Fine-tune one configuration; see the module docstring. ``resume_from``: a state folder a reporter got.
    ``completes``: the epoch counts of the shorter configurations this run also completes on its way (a search's
    shared trial); they are scored like its own last epoch. ``sigma_cache``: a folder where the pretrained model's
    Σ_S is shared between runs (:func:`~istar_tune.training.sigma.reused_shrinkage`). ``task``: the task itself
    (default: the task ``hparams.task`` names)."""
    run = prepare(hparams, settings, task)
    run.heartbeat = getattr(reporter, "heartbeat", None)
    if (read := getattr(reporter, "task_read", None)) is not None:  # what it trains on, said before it starts
        read(run.task)
    if (read := getattr(reporter, "data_read", None)) is not None:  # the tokenised splits (a search's dataset inputs)
        read(run.task, run.data)
    output_dir = Path(settings.output_dir) if settings.output_dir else None
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / CONFIG_FILE).write_text(yaml.safe_dump(resolved_config(run), sort_keys=False), "utf-8")
    result = TrainResult(metric=run.task.metric, epochs=[], best_epoch=0, status=TrialStatus.RUNNING)
    try:
        finished = _fit(run, result, reporter, resume_from, output_dir, set(completes), sigma_cache)
        if get_method(hparams.method).second_stage and not finished:
            _second_stage(run, result, reporter, output_dir)
        result.status = TrialStatus.FINISHED
    except BaseException as err:
        result.status = TrialStatus.FAILED
        result.error = f"{type(err).__name__}: {err}"
        raise
    finally:
        if output_dir is not None:
            write_json_atomic(output_dir / METRICS_FILE, result.as_json())
    return result


def _fit(run: Run, result: TrainResult, reporter: Reporter | None, resume_from, output_dir: Path | None,
         completes: set[int], sigma_cache: str | os.PathLike | None = None) -> bool:
    """The fine-tuning epochs; True when a resumed state says the whole run had finished."""
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
        return True
    last = start if stopped else epochs
    params = [p for _, p in named if p.requires_grad]
    # Σ_S of the model as it is now (draw `start`): it shrinks the first epoch trained here (I-STAR). After each
    # epoch one new draw from the updated model serves both that epoch's eval IsoScore* and the next epoch's
    # training; a method without Σ_S in its loss draws only where its eval IsoScore* is used (`measures_star`).
    stepper = stage_steps(run.step_mode, run.device)  # a graphed stage holds Σ_S where its graphs read it
    shrinkage_cov = stepper.own(_first_shrinkage(run, start, sigma_cache) if start < last and in_loss else None)
    for epoch in range(start + 1, last + 1):
        began = time.perf_counter()
        gathered = training_pass_covariance(run, selection, epoch, completes | {epochs}, in_loss)
        observe = None if gathered is None else (
            lambda hidden, mask, c=gathered: c.update(*token_cloud(run, hidden, mask)))
        with DeviceUsage(run.device) as usage:
            losses = train_epoch(run, method_loss(run, shrinkage_cov, observe), params, optimizer, scheduler, scaler,
                                 epoch, f"epoch {epoch}/{epochs}", stepper=stepper)
        trained = time.perf_counter()
        losses.update(usage.record(), train_tokens_per_s=losses.pop(TRAIN_TOKENS) / max(trained - began, 1e-9))
        held_out = evaluate_holdout(run) if selection.holdout else {}
        measured = in_loss or measures_star(run, selection, epoch, held_out, completes | {epochs})
        if not measured:
            shrinkage_cov = None
        else:
            new = estimate_shrinkage(run, draw=epoch) if gathered is None else gathered.covariance(torch.float32)
            shrinkage_cov = stepper.refreshed(shrinkage_cov, new.to(run.device))
        estimated = time.perf_counter()
        metrics = {**evaluate(run, shrinkage_cov), **held_out}
        ended = time.perf_counter()
        record = {"epoch": epoch, **metrics, **losses, SCHEDULED_LR: scheduler.get_last_lr()[0],
                  "shrinkage_time_s": estimated - trained, "train_time_s": trained - began,
                  "eval_time_s": ended - estimated, "epoch_time_s": ended - began}
        if measured and not (in_loss or selection.holdout or run.settings.isoscore_star_every_epoch or epoch == epochs):
            record[CLOSING_ONLY] = ",".join(STAR_KEYS)  # measured for the shorter configuration ending here
        stop, ends = _close_epoch(run, result, selection, record, epochs, output_dir,
                                  lambda folder: save_pretrained(run, folder))
        if stop:
            log.info("no better held-out %s for %d epochs: fine-tuning ends after epoch %d, scored at epoch %d",
                     run.task.metric, run.settings.patience, epoch, selection.best[0])
        final = ends and not second_stage
        contents = ({"resume": "records", "weights": "weights"}.get(run.settings.checkpoint, "state") if final
                    else "state")
        saved = Saved(epoch, result.epochs, selection.best, contents, stopped=stop,
                      best_model=None if ends else selection.kept_unless(epoch), finished=final)
        report_epoch(reporter, record, checkpointer.writer(saved))
        if stop:
            break
    return False


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


def _second_stage(run: Run, result: TrainResult, reporter: Reporter | None, output_dir: Path | None) -> None:
    """IsoLayer's stage 2 through the same epoch loop: freeze the fine-tuned model, insert the layer (a hook), train
    it with the joint loss, report each epoch, and record the sentence space before and after (after: of the scored
    epoch). With ``holdout`` the stage chooses its own scored epoch among its epochs."""
    hp = run.hparams
    run.model.zero_grad(set_to_none=True)  # the frozen encoder's gradients (kept allocated by step_mode graphs)
    for param in run.model.parameters():
        param.requires_grad_(False)
    hook = IsoLayerHook(run.model)
    try:
        before = _sentence_space(run, hook)
        named = list(hook.layer.named_parameters())
        # No weight decay: it would pull the identity-initialised layer towards zero, not towards the identity.
        optimizer, scheduler, scaler = make_optimizer(run, named, hp.isolayer_learning_rate, hp.isolayer_epochs,
                                                      hp.warmup_ratio, decay=False)
        checkpointer = Checkpointer(run, optimizer, scheduler, scaler)
        joint = IsoLayerLoss(hp.alpha)

        def loss_fn(batch):
            with run.autocast():
                outputs = run.model(**batch)
            task_loss = outputs.loss.float()
            total, iso_loss = joint(task_loss, hook.embeddings)
            return total, task_loss, iso_loss

        stage_one_epochs = len(result.epochs)
        selection = Selection(run, hook.layer, start=stage_one_epochs)
        spaces: dict[int, SentenceSpace] = {}
        for stage_epoch in range(1, hp.isolayer_epochs + 1):
            epoch = stage_one_epochs + stage_epoch
            losses = train_epoch(run, loss_fn, [p for _, p in named], optimizer, scheduler, scaler, epoch,
                                 f"second stage {stage_epoch}/{hp.isolayer_epochs}", train_modules=hook.layer)
            spaces[epoch] = _sentence_space(run, hook)
            record = {"epoch": epoch, "stage": 2, **spaces[epoch].as_record(), "train_loss": losses["train_loss"],
                      "task_loss": losses["task_loss"], "isolayer_l2": losses["penalty"],
                      **{FINETUNED_PREFIX + k: v for k, v in before.as_record().items()}}
            if selection.holdout:
                record.update(evaluate_holdout(run))
            stop, ends = _close_epoch(run, result, selection, record, stage_one_epochs + hp.isolayer_epochs,
                                      output_dir, lambda folder: _save_with_layer(run, hook, folder),
                                      later_ties_win=True)
            # The last report keeps the model and the trained layer (records only with ``checkpoint: resume``);
            # a trial retried within this stage repeats it from the fine-tuned state.
            contents = "records" if run.settings.checkpoint == "resume" else "weights"
            saved = Saved(epoch, result.epochs, selection.best, contents, isolayer=hook.layer.state_dict(),
                          finished=True)
            report_epoch(reporter, record, checkpointer.writer(saved) if ends else None)
            if stop:
                break
        scored = selection.best[0] if selection.holdout else max(spaces, default=None)
        result.second_stage = IsoLayerResult(before=before, after=spaces.get(scored, before))
    finally:
        hook.remove()


def _close_epoch(run: Run, result: TrainResult, selection: Selection, record: dict[str, Any], last: int,
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


def _save_with_layer(run: Run, hook: IsoLayerHook, folder: Path) -> None:
    """The best checkpoint of IsoLayer's stage 2: the model and, beside it, the trained layer."""
    save_pretrained(run, folder)
    torch.save(hook.layer.state_dict(), folder / ISOLAYER_FILE)


def _sentence_space(run: Run, hook: IsoLayerHook) -> SentenceSpace:
    """The validation set's sentence embeddings after the IsoLayer (read by its hook) and the task metric."""
    embeddings, logits = [], []
    loader = run.loader(run.data.validation, run.settings.eval_batch_size)
    for _, outputs in forward_pass(run.model, loader, run.device, run.autocast, hidden_states=False):
        embeddings.append(hook.embeddings.float().cpu())
        logits.append(outputs.logits.float().cpu().numpy())
    return sentence_space(run.task, torch.cat(embeddings), np.concatenate(logits), run.data.labels)
