"""The one training path for every method and task.

:func:`train` takes a run's :class:`~istar_tune.config.Hyperparameters` (what a search samples) and
:class:`~istar_tune.config.RunSettings`, fine-tunes, evaluates after every epoch and hands each epoch's record to
a reporter (the CLI prints it; a Ray trial reports it to Tune with a checkpoint). Methods differ only in the loss
built by :func:`_loss_fn`; a method with a second stage (IsoLayer) runs it through the same epoch loop with its own
loss and hook (``isolayer.py``).

Per epoch: the model trains with AdamW and the recipe's schedule (gradient accumulation, clipping, mixed precision on
CUDA with the penalty in float32) against a Σ_S estimated from up to ``shrinkage_tokens`` training tokens (no
gradient, streaming); then Σ_S is re-estimated from the updated model, and the validation set gives the task
metric(s) and the IsoScore* of its all-layer token cloud shrunk towards that Σ_S with ``eval_zeta``.

Which epoch is scored (:class:`Selection`): the last, or, with the ``holdout`` setting, the epoch of each stage whose
task metric on held-out training examples is best; its weights are put back when the stage ends (``patience`` ends
it early), and every record then carries that epoch's validation measures as ``scored_<name>``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import yaml

from istar_tune.config import RECIPES, Hyperparameters, RunSettings, as_dict, validate
from istar_tune.data import EncodedData, encode, hold_out, load_raw, squad_predictions, squad_references
from istar_tune.errors import TrainingError
from istar_tune.forward import forward_pass
from istar_tune.isolayer import IsoLayerHook, IsoLayerLoss, IsoLayerResult, SentenceSpace, sentence_space
from istar_tune.isotropy import isoscore_star_from_cov
from istar_tune.losses import layer_points, penalty
from istar_tune.methods import PENALISED, get_method
from istar_tune.metrics import SCORED_PREFIX, classification_metrics, squad_scores
from istar_tune.models import (
    check_max_length,
    hidden_size,
    load_model,
    load_tokenizer,
    max_positions,
    model_spec,
    resolve_source,
)
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.tasks import EXTRACTIVE_QA, Task, get_task

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
BEST_CHECKPOINT = "best-checkpoint"
METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"
ISOLAYER_FILE = "isolayer.pt"
"""IsoLayer's trained layer (a state dict), beside the model in a best checkpoint."""
HOLDOUT_PREFIX = "holdout_"


class Reporter(Protocol):
    """Receives each epoch's record. ``wants_checkpoint``: train writes a resumable state folder for it."""

    wants_checkpoint: bool

    def __call__(self, record: dict[str, Any], checkpoint_dir: Path | None) -> None: ...


@dataclass
class TrainResult:
    metric: str
    """The task's selection metric (``accuracy``, ``mcc``, ``pearson`` or ``f1``)."""
    epochs: list[dict[str, Any]]
    best_epoch: int
    status: str = "finished"
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


# ------------------------------------------------------------------------------------------------ set-up


def resolve_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(setting)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainingError(f"device {setting!r} was asked for but CUDA is not available: use --device cpu or auto")
    return device


def resolve_precision(setting: str, device: torch.device, recipe: str = "modern") -> torch.dtype | None:
    """The autocast dtype (``None`` = full float32). ``auto`` is float32 on CPU and, on CUDA, the recipe's choice:
    bf16 when supported, else fp16 (with a gradient scaler), or fp16 (``paper``); ``fp16`` and ``bf16`` are honoured
    on CPU too (slow there, but the same code path, so tests run it)."""
    if setting == "fp32" or (setting == "auto" and device.type != "cuda"):
        return None
    if setting == "fp16" or (setting == "auto" and RECIPES[recipe].auto_precision_on_cuda == "fp16"):
        return torch.float16
    if setting == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


@dataclass
class _Run:
    """Everything one run trains with; built once by :func:`prepare`."""

    hparams: Hyperparameters
    settings: RunSettings
    task: Task
    tokenizer: Any
    model: torch.nn.Module
    data: EncodedData
    device: torch.device
    amp_dtype: torch.dtype | None
    collate: Callable

    def loader(self, dataset, batch_size: int, shuffle_seed: int | None = None) -> torch.utils.data.DataLoader:
        generator = None
        if shuffle_seed is not None:
            generator = torch.Generator().manual_seed(shuffle_seed)
        return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle_seed is not None,
                                           generator=generator, collate_fn=self.collate)

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def autocast(self):
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)


def prepare(hparams: Hyperparameters, settings: RunSettings) -> _Run:
    """Validate inputs by loading them: task, data files, tokenizer, model. Raises before anything is written."""
    from transformers import DataCollatorWithPadding

    validate(hparams, source="hyperparameters")
    validate(settings, source="settings")
    task = get_task(hparams.task)
    device = resolve_device(settings.device)
    quiet_libraries(not settings.progress)
    seed_everything(hparams.seed)
    tokenizer = load_tokenizer(hparams.model)
    check_max_length(settings.max_length, max_positions(settings.init_checkpoint or hparams.model),
                     settings.init_checkpoint or hparams.model)
    raw = load_raw(task, settings.data_dir, settings.max_train_samples, settings.max_eval_samples)
    recipe = RECIPES[settings.recipe]
    data = encode(task, raw, tokenizer, settings.max_length, recipe.squad_window, recipe.squad_stride)
    if settings.holdout is not None:
        split_seed = hparams.seed if settings.holdout_seed is None else settings.holdout_seed
        data = hold_out(data, settings.holdout, split_seed)
    model_source = settings.init_checkpoint or hparams.model
    model = load_model(model_source, task).to(device)
    return _Run(hparams=hparams, settings=settings, task=task, tokenizer=tokenizer, model=model, data=data,
                device=device, amp_dtype=resolve_precision(settings.precision, device, settings.recipe),
                collate=DataCollatorWithPadding(tokenizer))


def quiet_libraries(quiet: bool) -> None:
    """Progress bars and info logs of datasets/transformers off (Ray trials, tests) or on (the CLI)."""
    import datasets
    import transformers

    for library in (datasets.utils.logging, transformers.utils.logging):
        (library.disable_progress_bar if quiet else library.enable_progress_bar)()
    if quiet:
        transformers.utils.logging.set_verbosity_error()


# ------------------------------------------------------------------------------------- the pieces of an epoch


def shrinkage_order(size: int, seed: int, draw: int) -> list[int]:
    """The order in which the Σ_S pass ``draw`` reads the training set: a seeded random permutation, a fresh one
    per draw (draw 0 before training, draw k after epoch k), the same for the same seed."""
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(draw))
    return torch.randperm(size, generator=generator).tolist()


def estimate_shrinkage(run: _Run, draw: int = 0) -> torch.Tensor:
    """Σ_S: covariance of up to ``shrinkage_tokens`` training tokens drawn in a seeded random order of the whole
    training set (:func:`shrinkage_order`), from the points the penalty sees (all layers, or ``layer``; padding
    as ``include_padding``); eval mode, no gradient."""
    estimator = StreamingCovariance(hidden_size(run.model), budget=run.settings.shrinkage_tokens)
    order = shrinkage_order(len(run.data.train), run.hparams.seed, draw)
    # Its own generator: the pass must not draw from the global RNG (a resumed run repeats it before training).
    loader = torch.utils.data.DataLoader(run.data.train, batch_size=run.settings.eval_batch_size, sampler=order,
                                         collate_fn=run.collate, generator=torch.Generator().manual_seed(draw))
    for batch, outputs in forward_pass(run.model, loader, run.device, run.autocast):
        points, mask = _cloud(run, outputs.hidden_states, batch["attention_mask"])
        estimator.update(points, mask)
        if estimator.full:
            break
    return estimator.covariance(torch.float32)


def _cloud(run: _Run, hidden_states, attention_mask) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token points I-STAR regularises (all layers or ``layer``; padding masked unless ``include_padding``):
    the same selection for Σ_S, the penalty and the eval IsoScore*."""
    return layer_points(hidden_states, attention_mask, run.hparams.layer, run.hparams.include_padding)


LossFn = Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]
"""batch → (total loss, task loss, penalty or None)."""


def _loss_fn(run: _Run, shrinkage_cov: torch.Tensor | None) -> LossFn:
    """The method's loss: task loss + penalty (I-STAR, CosReg), or the task loss alone (Base, IsoLayer stage 1)."""
    hp = run.hparams
    lam = hp.penalty_weight
    needs_hidden = hp.method in PENALISED and lam != 0

    def compute(batch):
        with run.autocast():
            outputs = run.model(**batch, output_hidden_states=needs_hidden)
        task_loss = outputs.loss.float()
        pen = None
        if needs_hidden:
            pen = penalty(hp.method, outputs.hidden_states, batch["attention_mask"], lam=lam, zeta=hp.zeta,
                          shrinkage_cov=shrinkage_cov, layer=hp.layer, include_padding=hp.include_padding)
        return (task_loss if pen is None else task_loss + pen), task_loss, pen

    return compute


def train_epoch(run: _Run, loss_fn: LossFn, params: list[torch.nn.Parameter], optimizer, scheduler, scaler,
                epoch: int, description: str, train_modules: torch.nn.Module | None = None) -> dict[str, float]:
    """One pass over the shuffled training data; returns mean losses. Shared by every method and stage.

    ``train_modules``: only these modules run in training mode (dropout on); the rest of the model stays in
    evaluation mode (IsoLayer's frozen encoder). ``None``: the whole model trains.
    """
    from tqdm.auto import tqdm

    if train_modules is None:
        run.model.train()
    else:
        run.model.eval()
        train_modules.train()
    accum = run.hparams.grad_accum
    loader = run.loader(run.data.train, run.hparams.batch_size, shuffle_seed=run.hparams.seed + epoch)
    totals = {"train_loss": 0.0, "task_loss": 0.0, "penalty": 0.0}
    steps = len(loader)
    bar = tqdm(loader, desc=description, disable=not run.settings.progress, leave=False, unit="batch")
    optimizer.zero_grad(set_to_none=True)
    for step, batch in enumerate(bar):
        loss, task_loss, pen = loss_fn(run.to_device(batch))
        # One host transfer per step for the logged values and the NaN check (each .item() would sync a GPU).
        values = torch.stack([loss.detach(), task_loss.detach(),
                              pen.detach() if pen is not None else torch.zeros_like(loss)]).tolist()
        if not math.isfinite(values[0]):
            raise TrainingError(f"the loss became {values[0]} at epoch {epoch}, step {step + 1}: lower the "
                                f"learning rate ({run.hparams.learning_rate}) or |lam| ({run.hparams.lam})")
        scaler.scale(loss / accum).backward()
        if (step + 1) % accum == 0 or step + 1 == steps:
            if RECIPES[run.settings.recipe].clip and run.settings.max_grad_norm > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, run.settings.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        for key, value in zip(("train_loss", "task_loss", "penalty"), values):
            totals[key] += value
        bar.set_postfix(loss=f"{totals['train_loss'] / (step + 1):.4f}")
    return {k: v / max(steps, 1) for k, v in totals.items()}


@torch.no_grad()
def evaluate(run: _Run, shrinkage_cov: torch.Tensor | None) -> dict[str, float]:
    """Task metric(s) on the validation set, and IsoScore (ζ = 0) and IsoScore* (``eval_zeta`` towards Σ_S) of
    the all-layer token cloud of the whole validation set."""
    from tqdm.auto import tqdm

    cloud = StreamingCovariance(hidden_size(run.model), budget=2**62)
    outputs_by_key: dict[str, list[np.ndarray]] = {}
    loader = run.loader(run.data.validation, run.settings.eval_batch_size)
    bar = tqdm(loader, desc="evaluating", disable=not run.settings.progress, leave=False, unit="batch")
    for batch, outputs in forward_pass(run.model, bar, run.device, run.autocast):
        points, mask = _cloud(run, outputs.hidden_states, batch["attention_mask"])  # (L·B·T, d), (L·B·T,)
        cloud.update(points, mask)
        keys = ("start_logits", "end_logits") if run.task.problem_type == EXTRACTIVE_QA else ("logits",)
        for key in keys:
            outputs_by_key.setdefault(key, []).extend(getattr(outputs, key).float().cpu().numpy())
    if run.task.problem_type == EXTRACTIVE_QA:
        predictions = squad_predictions(run.data, outputs_by_key["start_logits"], outputs_by_key["end_logits"])
        metrics = squad_scores(predictions, squad_references(run.data))
    else:
        metrics = classification_metrics(run.task, np.stack(outputs_by_key["logits"]), run.data.labels)
    eval_cov = cloud.covariance(torch.float64)
    metrics["eval_isoscore"] = float(isoscore_star_from_cov(eval_cov))
    if shrinkage_cov is not None:
        zeta = run.settings.eval_zeta
        shrunk = (1 - zeta) * eval_cov + zeta * shrinkage_cov.to(eval_cov)
        metrics["eval_isoscore_star"] = float(isoscore_star_from_cov(shrunk))
        metrics["eval_zeta"] = zeta  # logged with the score, so plots and tables say which ζ it used
    return metrics


@torch.no_grad()
def evaluate_holdout(run: _Run) -> dict[str, float]:
    """The task metric(s) on the held-out training examples (``holdout``) as ``holdout_<metric>``: what chooses the
    scored epoch. Logits only; through IsoLayer's layer when its hook is on."""
    loader = run.loader(run.data.holdout, run.settings.eval_batch_size)
    logits = [outputs.logits.float().cpu().numpy()
              for _, outputs in forward_pass(run.model, loader, run.device, run.autocast, hidden_states=False)]
    measured = classification_metrics(run.task, np.concatenate(logits), np.asarray(run.data.holdout["labels"]))
    return {HOLDOUT_PREFIX + k: v for k, v in measured.items()}


class Selection:
    """Which epoch of a stage is scored, and the epoch ``best_epoch`` names.

    Without ``holdout``: the last epoch is scored, and ``best`` follows the best validation metric (the best
    checkpoint, ``--scope best-epoch``). With it: ``best`` follows the best held-out metric and is the scored epoch;
    the weights of ``module`` at that epoch are kept (on the CPU) and put back by :meth:`restore` when the stage
    ends; ``patience`` epochs without a better held-out metric end the stage.
    """

    def __init__(self, run: _Run, module: torch.nn.Module, start: int = 0):
        self.run = run
        self.module = module
        self.holdout = run.data.holdout is not None
        self.key = (HOLDOUT_PREFIX if self.holdout else "") + run.task.metric
        self.best: tuple[int, float] = (start, -math.inf)
        self.kept: dict[str, torch.Tensor] | None = None

    def update(self, epoch: int, record: dict[str, Any]) -> bool:
        """Note an epoch's record; True when it is the new best."""
        if not record[self.key] > self.best[1]:
            return False
        self.best = (epoch, record[self.key])
        if self.holdout:
            self.kept = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        return True

    def scored(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """``scored_epoch`` and ``scored_<name>`` of the scored epoch's validation measures (holdout only)."""
        chosen = next((r for r in records if r["epoch"] == self.best[0]), None)
        if not self.holdout or chosen is None:
            return {}
        names = [*self.run.task.metrics, *(k for k in chosen if k.startswith(("eval_isoscore", "sentence_")))]
        return {"scored_epoch": self.best[0], **{SCORED_PREFIX + k: chosen[k] for k in names if k in chosen}}

    def resume(self, best: tuple[int, float], kept: dict[str, torch.Tensor] | None, epoch: int) -> None:
        """Continue after ``epoch`` from a saved state: its best, and the kept weights it saved (none when the best
        epoch was ``epoch`` itself: the weights just loaded are the ones to keep)."""
        self.best = (int(best[0]), float(best[1]))
        self.kept = kept
        if self.holdout and kept is None and self.best[0] == epoch:
            self.kept = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}

    def should_stop(self, epoch: int) -> bool:
        patience = self.run.settings.patience
        return self.holdout and patience is not None and epoch - self.best[0] >= patience

    def restore(self) -> None:
        """Put the scored epoch's weights back (holdout only)."""
        if self.holdout and self.kept is not None:
            self.module.load_state_dict(self.kept)

    def kept_unless(self, epoch: int) -> dict[str, torch.Tensor] | None:
        """The kept weights when they are not the module's current ones (for a resumable state)."""
        return self.kept if self.holdout and self.best[0] != epoch else None


def make_optimizer(run: _Run, params: list[tuple[str, torch.nn.Parameter]], learning_rate: float,
                   epochs: int, warmup_ratio: float):
    """AdamW (no decay on biases and LayerNorm weights), the recipe's schedule, and a gradient scaler for fp16."""
    from transformers import get_constant_schedule, get_linear_schedule_with_warmup

    recipe = RECIPES[run.settings.recipe]
    weight_decay = run.hparams.weight_decay if recipe.weight_decay is None else recipe.weight_decay
    decay = [p for n, p in params if p.requires_grad and not _no_decay(n)]
    no_decay = [p for n, p in params if p.requires_grad and _no_decay(n)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel is several times faster than the per-parameter loop (7x for MiniLM on 2 CPU cores).
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, fused=True)
    if recipe.schedule == "constant":
        scheduler = get_constant_schedule(optimizer)
    else:
        steps_per_epoch = math.ceil(math.ceil(len(run.data.train) / run.hparams.batch_size) / run.hparams.grad_accum)
        total = steps_per_epoch * epochs
        scheduler = get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total), total)
    scaler = torch.amp.GradScaler(run.device.type, enabled=run.amp_dtype == torch.float16)
    return optimizer, scheduler, scaler


def _no_decay(name: str) -> bool:
    return name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name or "layernorm" in name.lower()


# ---------------------------------------------------------------------------------------- state and outputs


def save_state(directory: Path, run: _Run, optimizer, scheduler, scaler, epoch: int, records: list[dict],
               best: tuple[int, float], contents: str = "state", *, stopped: bool = False,
               best_model: dict | None = None, isolayer: dict | None = None, finished: bool = False) -> None:
    """Everything a retried trial needs to continue after ``epoch`` (``contents="state"``); after the last epoch,
    ``records`` keeps only the epoch records and ``weights`` the records and the model weights (the ``checkpoint``
    setting). ``stopped``: the fine-tuning stage ended early (``patience``); ``best_model``: the scored epoch's
    weights where they are not the current ones; ``isolayer``: IsoLayer's layer; ``finished``: nothing is left to
    train."""
    directory.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"epoch": epoch, "records": records, "best": best, "hparams": as_dict(run.hparams),
                             "stopped": stopped, "finished": finished}
    if contents in ("state", "weights"):
        state["model"] = run.model.state_dict()
        if isolayer is not None:
            state["isolayer"] = isolayer
    if contents == "state":
        state.update(optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(), scaler=scaler.state_dict(),
                     torch_rng=torch.get_rng_state(), numpy_rng=np.random.get_state(), python_rng=random.getstate())
        if best_model is not None:
            state["best_model"] = best_model
    torch.save(state, directory / STATE_FILE)


def read_state(directory: Path) -> dict[str, Any]:
    """The state saved in ``directory`` (fails on a missing or truncated file)."""
    return torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=False)


def load_state(directory: Path, run: _Run, optimizer, scheduler, scaler) -> dict[str, Any]:
    """Read a saved state and, where it can be continued, load it into the run; returns the state (a state without
    optimizer state belongs to a trial with nothing left to train)."""
    state = read_state(directory)
    if state["hparams"] != as_dict(run.hparams):
        raise TrainingError(f"checkpoint {directory} belongs to different hyperparameters; start a new run")
    state.setdefault("stopped", False)
    if "optimizer" not in state:  # the trial had finished: nothing is left to train
        state["finished"] = True
        return state
    run.model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"].cpu())
    np.random.set_state(state["numpy_rng"])
    random.setstate(state["python_rng"])
    return state


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def resolved_config(run: _Run) -> dict[str, Any]:
    config = run.model.config
    return {
        "hyperparameters": {**as_dict(run.hparams), "lam": run.hparams.penalty_weight},
        "settings": as_dict(run.settings),
        "resolved": {
            "task": run.task.name,
            "metric": run.task.metric,
            "model_source": resolve_source(model_spec(run.settings.init_checkpoint or run.hparams.model)),
            "hidden_size": hidden_size(run.model),
            "num_hidden_layers": getattr(config, "num_hidden_layers", getattr(config, "n_layers", None)),
            "device": str(run.device),
            "precision": str(run.amp_dtype).replace("torch.", "") if run.amp_dtype else "fp32",
            "train_examples": len(run.data.train),
            "eval_examples": len(run.data.validation),
            "torch": str(torch.__version__),
        },
    }


# ---------------------------------------------------------------------------------------------- the loop


def train(hparams: Hyperparameters, settings: RunSettings, reporter: Reporter | None = None,
          resume_from: str | os.PathLike | None = None) -> TrainResult:
    """Fine-tune one configuration; see the module docstring. ``resume_from``: a state folder a reporter got."""
    run = prepare(hparams, settings)
    output_dir = Path(settings.output_dir) if settings.output_dir else None
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / CONFIG_FILE).write_text(yaml.safe_dump(resolved_config(run), sort_keys=False), "utf-8")
    result = TrainResult(metric=run.task.metric, epochs=[], best_epoch=0, status="running")
    try:
        finished = _fit(run, result, reporter, resume_from, output_dir)
        if get_method(hparams.method).second_stage and not finished:
            _second_stage(run, result, reporter, output_dir)
        result.status = "finished"
    except BaseException as err:
        result.status = "failed"
        result.error = f"{type(err).__name__}: {err}"
        raise
    finally:
        if output_dir is not None:
            write_json_atomic(output_dir / METRICS_FILE, result.as_json())
    return result


def _fit(run: _Run, result: TrainResult, reporter: Reporter | None, resume_from, output_dir: Path | None) -> bool:
    """The fine-tuning epochs; True when a resumed state says the whole run had finished."""
    hp = run.hparams
    second_stage = get_method(hp.method).second_stage
    epochs = 0 if run.settings.init_checkpoint and second_stage else hp.epochs
    named = list(run.model.named_parameters())
    optimizer, scheduler, scaler = make_optimizer(run, named, hp.learning_rate, max(epochs, 1), hp.warmup_ratio)
    selection = Selection(run, run.model)
    start, stopped = 0, False
    if resume_from is not None and (Path(resume_from) / STATE_FILE).is_file():
        state = load_state(Path(resume_from), run, optimizer, scheduler, scaler)
        if state["finished"]:
            result.epochs, result.best_epoch = state["records"], state["best"][0]
            return True
        start, result.epochs, stopped = state["epoch"], state["records"], state["stopped"]
        selection.resume(state["best"], state.get("best_model"), start)
        result.best_epoch = selection.best[0]
        log.info("resuming after epoch %d of %d", start, epochs)
    last = start if stopped else epochs
    params = [p for _, p in named if p.requires_grad]
    # Σ_S of the model as it is now (draw `start`): it shrinks the first epoch trained here. After each epoch one
    # new draw from the updated model serves both that epoch's eval IsoScore* and the next epoch's training.
    shrinkage_cov = estimate_shrinkage(run, draw=start).to(run.device) if start < last else None
    for epoch in range(start + 1, last + 1):
        began = time.perf_counter()
        losses = train_epoch(run, _loss_fn(run, shrinkage_cov), params, optimizer, scheduler, scaler, epoch,
                             f"epoch {epoch}/{epochs}")
        trained = time.perf_counter()
        shrinkage_cov = estimate_shrinkage(run, draw=epoch).to(run.device)
        estimated = time.perf_counter()
        metrics = evaluate(run, shrinkage_cov)
        if selection.holdout:
            metrics.update(evaluate_holdout(run))
        ended = time.perf_counter()
        record = {"epoch": epoch, **metrics, **losses, "learning_rate": scheduler.get_last_lr()[0],
                  "shrinkage_time_s": estimated - trained, "train_time_s": trained - began,
                  "eval_time_s": ended - estimated, "epoch_time_s": ended - began}
        result.epochs.append(record)
        if selection.update(epoch, record):
            result.best_epoch = epoch
            if output_dir is not None and run.settings.save_checkpoint:
                save_pretrained(run, output_dir / BEST_CHECKPOINT)
        record.update(selection.scored(result.epochs))
        stop = selection.should_stop(epoch)
        ends = stop or epoch == epochs
        if ends:
            selection.restore()  # the scored epoch's weights go on: to the second stage, into the final checkpoint
            if stop:
                log.info("no better held-out %s for %d epochs: fine-tuning ends after epoch %d, scored at epoch %d",
                         run.task.metric, run.settings.patience, epoch, selection.best[0])
        if output_dir is not None:
            write_json_atomic(output_dir / METRICS_FILE, result.as_json())
        final = ends and not second_stage
        contents = {"resume": "records", "weights": "weights"}.get(run.settings.checkpoint, "state") if final \
            else "state"
        kept = None if ends else selection.kept_unless(epoch)
        _report(reporter, record, lambda d, e=epoch, b=selection.best, c=contents, x=stop, k=kept, f=final: save_state(
            d, run, optimizer, scheduler, scaler, e, result.epochs, b, c, stopped=x, best_model=k, finished=f))
        if stop:
            break
    return False


def _second_stage(run: _Run, result: TrainResult, reporter: Reporter | None, output_dir: Path | None) -> None:
    """IsoLayer's stage 2 through the same epoch loop: freeze the fine-tuned model, insert the layer (a hook), train
    it with the joint loss, report each epoch, and record the sentence space before and after (after: of the scored
    epoch). With ``holdout`` the stage chooses its own scored epoch among its epochs."""
    hp = run.hparams
    for param in run.model.parameters():
        param.requires_grad_(False)
    hook = IsoLayerHook(run.model)
    try:
        before = _sentence_space(run, hook)
        named = list(hook.layer.named_parameters())
        optimizer, scheduler, scaler = make_optimizer(run, named, hp.isolayer_learning_rate, hp.isolayer_epochs,
                                                      hp.warmup_ratio)
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
                      "task_loss": losses["task_loss"], "isolayer_l2": losses["penalty"]}
            if selection.holdout:
                record.update(evaluate_holdout(run))
            result.epochs.append(record)
            improved = selection.update(epoch, record)
            if not selection.holdout:  # the best validation epoch over both stages, the later one on a tie
                improved = record[run.task.metric] >= result.best.get(run.task.metric, -math.inf)
            if improved:
                result.best_epoch = epoch
                if output_dir is not None and run.settings.save_checkpoint:
                    save_pretrained(run, output_dir / BEST_CHECKPOINT)
                    torch.save(hook.layer.state_dict(), output_dir / BEST_CHECKPOINT / ISOLAYER_FILE)
            record.update(selection.scored(result.epochs))
            stop = selection.should_stop(epoch)
            ends = stop or stage_epoch == hp.isolayer_epochs
            if ends:
                selection.restore()
            if output_dir is not None:
                write_json_atomic(output_dir / METRICS_FILE, result.as_json())
            # The last report keeps the model and the trained layer (records only with ``checkpoint: resume``);
            # a trial retried within this stage repeats it from the fine-tuned state.
            contents = "records" if run.settings.checkpoint == "resume" else "weights"
            _report(reporter, record, (lambda d, e=epoch, c=contents: save_state(
                d, run, optimizer, scheduler, scaler, e, result.epochs, selection.best, c,
                isolayer=hook.layer.state_dict(), finished=True)) if ends else None)
            if stop:
                break
        scored = selection.best[0] if selection.holdout else max(spaces, default=None)
        result.second_stage = IsoLayerResult(before=before, after=spaces.get(scored, before))
    finally:
        hook.remove()


def _sentence_space(run: _Run, hook: IsoLayerHook) -> SentenceSpace:
    """The validation set's sentence embeddings after the IsoLayer (read by its hook) and the task metric."""
    embeddings, logits = [], []
    loader = run.loader(run.data.validation, run.settings.eval_batch_size)
    for _, outputs in forward_pass(run.model, loader, run.device, run.autocast, hidden_states=False):
        embeddings.append(hook.embeddings.float().cpu())
        logits.append(outputs.logits.float().cpu().numpy())
    return sentence_space(run.task, torch.cat(embeddings), np.concatenate(logits), run.data.labels)


def _report(reporter: Reporter | None, record: dict, write_state: Callable[[Path], None] | None) -> None:
    """Hand ``record`` to the reporter, with a state folder written by ``write_state`` when it wants one."""
    if reporter is None:
        return
    if write_state is None or not getattr(reporter, "wants_checkpoint", False):
        reporter(record, None)
        return
    with tempfile.TemporaryDirectory(prefix="istar-tune-state-") as tmp:
        write_state(Path(tmp))
        reporter(record, Path(tmp))


def save_pretrained(run: _Run, directory: Path) -> None:
    """Model and tokenizer, loadable with ``from_pretrained`` (written to a sibling folder, then swapped in)."""
    staging = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    run.model.save_pretrained(staging)
    run.tokenizer.save_pretrained(staging)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(staging, directory)
