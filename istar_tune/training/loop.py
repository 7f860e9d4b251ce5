"""The one training path for every method and task.

:func:`train` takes a run's :class:`~istar_tune.config.Hyperparameters` (what a search samples) and
:class:`~istar_tune.config.RunSettings`, fine-tunes, evaluates after every epoch and hands each epoch's record to
a reporter (the CLI prints it; a Ray trial reports it to Tune with a checkpoint). Methods differ only in the loss
(:func:`~istar_tune.training.epoch.method_loss`); a method with a second stage (IsoLayer) runs it through the same
epoch pass with its own loss and hook (``isolayer.py``), and every epoch of every stage ends with the same
bookkeeping (``fitting.py``: a fine-tuning stage set up by ``begin_fit``, each epoch closed by ``end_epoch``, every
stage's epochs ending in ``close_epoch``; a bundle of configurations shares them, ``bundle.py``).

Per epoch: the model trains with AdamW and the recipe's schedule (gradient accumulation, clipping, mixed precision on
CUDA with the penalty in float32) against a Σ_S estimated from up to ``shrinkage_tokens`` training tokens (no
gradient, streaming); then Σ_S is re-estimated from the updated model, and the validation set gives the task
metric(s) and the IsoScore* of its all-layer token cloud shrunk towards that Σ_S with ``eval_zeta``. A method
without Σ_S in its loss estimates it only after the epochs whose eval IsoScore* can be scored (:func:`measures_star`),
from a separate pass or, with ``star_sigma: training``, from its training pass.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.methods import get_method
from istar_tune.metrics import FINETUNED_PREFIX
from istar_tune.tasks import Task
from istar_tune.training.epoch import method_loss, train_epoch
from istar_tune.training.evaluate import evaluate_holdout
from istar_tune.training.fitting import (
    TrainResult,
    begin_fit,
    close_epoch,
    end_epoch,
    training_pass_covariance,
)
from istar_tune.training.forward import forward_pass
from istar_tune.training.isolayer import IsoLayerHook, IsoLayerLoss, IsoLayerResult, SentenceSpace, sentence_space
from istar_tune.training.run import Run, make_optimizer, prepare
from istar_tune.training.selection import Selection
from istar_tune.training.sigma import token_cloud
from istar_tune.training.state import (
    CONFIG_FILE,
    ISOLAYER_FILE,
    METRICS_FILE,
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
    fit = begin_fit(run, result, reporter, resume_from, output_dir, completes, sigma_cache)
    if fit is None:
        return True
    for epoch in range(fit.start + 1, fit.last + 1):
        began = time.perf_counter()
        gathered = training_pass_covariance(run, fit.selection, epoch, completes | {fit.epochs}, fit.in_loss)
        observe = None if gathered is None else (
            lambda hidden, mask, c=gathered: c.update(*token_cloud(run, hidden, mask)))
        with DeviceUsage(run.device) as usage:
            losses = train_epoch(run, method_loss(run, fit.shrinkage_cov, observe), fit.params, fit.optimizer,
                                 fit.scheduler, fit.scaler, epoch, f"epoch {epoch}/{fit.epochs}", stepper=fit.stepper)
        losses.update(usage.record())
        if end_epoch(fit, epoch, losses, began, gathered):
            break
    return False


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
            stop, ends = close_epoch(run, result, selection, record, stage_one_epochs + hp.isolayer_epochs,
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
