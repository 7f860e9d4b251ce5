"""A run's set-up, validated by loading it: device, precision, seeds, task data, tokenizer and model
(:func:`prepare` builds the :class:`Run` every other training module takes), and the optimizer with the recipe's
schedule (:func:`make_optimizer`).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from istar_tune.config import Hyperparameters, RunSettings, task_problems, validate
from istar_tune.data.reading import read_task
from istar_tune.errors import ConfigError, TrainingError
from istar_tune.models import (
    check_max_length,
    load_model,
    load_tokenizer,
    max_positions,
)
from istar_tune.recipes import RECIPES
from istar_tune.step_modes import STEP_MODES, StepMode, get_step_mode
from istar_tune.tasks import Task, get_task
from istar_tune.training.data import EncodedData, encode, hold_out
from istar_tune.training.graphs import check_graphs
from istar_tune.training.scale import SCALE_ATTRIBUTE, saved_scale, unfold

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


def use_deterministic_algorithms(on: bool) -> None:
    """Torch's deterministic kernels on or off for this process (each run sets its own choice). cuBLAS needs its
    workspace fixed before its first call for that (``CUBLAS_WORKSPACE_CONFIG``), set here unless the user did."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = False


def use_attention_kernels(device: torch.device) -> None:
    """On CUDA, sdpa without cuDNN's attention kernel (PyTorch then picks its flash or memory-efficient kernel).
    cuDNN's builds a plan for every sequence length it has not seen, and each epoch's batches come padded to their
    own longest: on an H200 (BERT-base, batch 8, bf16) the first step at a new length took 173 ms (median of 16
    lengths; up to 1.9 s) against 38 ms once seen, and with it off 38 ms either way (``benchmarks/device/``
    section shapes). Process-wide, like the matmul precision; set by every run for itself."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


@dataclass
class Run:
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
    step_mode: StepMode = STEP_MODES["eager"]
    """How its training steps run (``settings.step_mode``), chosen when it starts."""
    heartbeat: Callable[[int, int, int], None] | None = None
    """Told ``(epoch, batches done, batches in the epoch)`` after every training batch (a search trial's progress)."""

    def loader(self, dataset, batch_size: int, shuffle_seed: int | None = None) -> torch.utils.data.DataLoader:
        generator = None
        if shuffle_seed is not None:
            generator = torch.Generator().manual_seed(shuffle_seed)
        return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle_seed is not None,
                                           generator=generator, collate_fn=self.collate)

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def autocast(self):
        # A CUDA graph's capture keeps no cast weights past itself: no cache there (the same casts, the same numbers).
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None, cache_enabled=not self.step_mode.graphs)


def prepare(hparams: Hyperparameters, settings: RunSettings, task: Task | None = None,
            data_of: Run | None = None) -> Run:
    """Validate inputs by loading them: task, data files, tokenizer, model. Raises before anything is written.
    ``task``: the task itself (a search's trial carries its definition); default: the task ``hparams.task`` names.
    ``data_of``: a run whose tokenizer and tokenised data this one reuses where they are the same (the same model,
    task, seed and settings: a bundle's members), instead of reading and tokenising them again."""
    from transformers import DataCollatorWithPadding

    validate(hparams, source="hyperparameters")
    validate(settings, source="settings")
    task = task if task is not None else get_task(hparams.task)
    if task.name != hparams.task and not (task.shipped and task is get_task(hparams.task)):
        raise ConfigError(f"hyperparameters: task is {hparams.task!r} but the task given is {task.name!r}: give the "
                          "same task")
    if problems := task_problems(hparams.method, task):
        raise ConfigError([f"hyperparameters: {p}" for p in problems])
    device = resolve_device(settings.device)
    amp_dtype = resolve_precision(settings.precision, device, settings.recipe)
    step_mode = get_step_mode(settings.step_mode)
    if step_mode.graphs:
        check_graphs(device, amp_dtype)
    use_deterministic_algorithms(settings.deterministic)
    torch.set_float32_matmul_precision(settings.matmul_precision)
    if settings.threads is not None:  # the count a search's trial computed with (an export carries it)
        torch.set_num_threads(settings.threads)
    use_attention_kernels(device)
    quiet_libraries(not settings.progress)
    seed_everything(hparams.seed)
    if data_of is not None and _same_data(data_of, hparams, settings, task):
        tokenizer, task, data = data_of.tokenizer, data_of.task, data_of.data
    else:
        tokenizer, task, data = _read_data(hparams, settings, task)
    model_source = settings.init_checkpoint or hparams.model
    model = load_model(model_source, task, settings.attn_implementation).to(device)
    if (scale := saved_scale(model)) is not None:  # a saved regression model trains on: back to z-scores
        unfold(model, scale)
        delattr(model.config, SCALE_ATTRIBUTE)
    if step_mode.compiles:  # in place: the state dict keeps its keys (checkpoints, save_pretrained)
        model.compile(mode="reduce-overhead" if device.type == "cuda" else None)
    return Run(hparams=hparams, settings=settings, task=task, tokenizer=tokenizer, model=model, data=data,
                device=device, amp_dtype=amp_dtype, step_mode=step_mode,
                collate=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=settings.length_bucket or None))


def _same_data(run: Run, hparams: Hyperparameters, settings: RunSettings, task: Task) -> bool:
    """Whether ``run``'s tokenizer and tokenised splits are the ones these inputs would read."""
    return (run.settings == settings and (run.task.name, run.task.files) == (task.name, task.files) and
            all(getattr(run.hparams, key) == getattr(hparams, key) for key in ("model", "task", "seed")))


def _read_data(hparams: Hyperparameters, settings: RunSettings, task: Task):
    """The tokenizer, the task as read and its tokenised splits (a share held out where ``holdout`` says)."""
    tokenizer = load_tokenizer(hparams.model)
    check_max_length(settings.max_length, max_positions(settings.init_checkpoint or hparams.model),
                     settings.init_checkpoint or hparams.model)
    task, raw = read_task(task, settings.data_dir, settings.max_train_samples,
                          settings.max_eval_samples)
    recipe = RECIPES[settings.recipe]
    data = encode(task, raw, tokenizer, settings.max_length, recipe.squad_window, recipe.squad_stride)
    if data.answers_beyond_windows:  # said in the task's line, never trained as "no answer" silently
        task = replace(task, answers_beyond_windows=data.answers_beyond_windows)
    if settings.holdout is not None:
        split_seed = hparams.seed if settings.holdout_seed is None else settings.holdout_seed
        data = hold_out(data, settings.holdout, split_seed)
    return tokenizer, task, data


def quiet_libraries(quiet: bool) -> None:
    """Progress bars and info logs of datasets/transformers off (Ray trials, tests) or on (the CLI)."""
    import datasets
    import transformers

    # The hub's own switch wins (HF_HUB_DISABLE_PROGRESS_BARS=1): turning bars on over it only draws its warning.
    bars = not quiet and os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").lower() not in ("1", "true", "yes", "on")
    for library in (datasets.utils.logging, transformers.utils.logging):
        (library.enable_progress_bar if bars else library.disable_progress_bar)()
    if quiet:
        transformers.utils.logging.set_verbosity_error()


def make_optimizer(run: Run, params: list[tuple[str, torch.nn.Parameter]], learning_rate: float,
                   epochs: int, warmup_ratio: float, decay: bool = True):
    """AdamW (no decay on biases and LayerNorm weights; none at all without ``decay``) with the recipe's ε, the
    recipe's schedule, and a gradient scaler for fp16."""
    from transformers import get_constant_schedule, get_linear_schedule_with_warmup

    recipe = RECIPES[run.settings.recipe]
    weight_decay = run.hparams.weight_decay if recipe.weight_decay is None else recipe.weight_decay
    weight_decay = weight_decay if decay else 0.0
    decay = [p for n, p in params if p.requires_grad and not _no_decay(n)]
    no_decay = [p for n, p in params if p.requires_grad and _no_decay(n)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel is several times faster than the per-parameter loop (7x for MiniLM on 2 CPU cores).
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, eps=recipe.adam_epsilon, fused=True)
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
