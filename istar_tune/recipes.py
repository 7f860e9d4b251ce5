"""The training recipes (``RunSettings.recipe``): how a run trains beyond its hyperparameters, one frozen table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    """How a run trains beyond its hyperparameters (``RunSettings.recipe``)."""

    name: str
    weight_decay: float | None
    """AdamW weight decay (``None``: the ``weight_decay`` hyperparameter)."""
    schedule: str
    """``linear`` (warm-up for ``warmup_ratio`` of the steps, then linear decay to 0) or ``constant``."""
    clip: bool
    """Clip gradients at ``max_grad_norm``."""
    auto_precision_on_cuda: str
    """What ``precision: auto`` is on CUDA: ``bf16`` (when supported, else fp16) or ``fp16`` (with a scaler)."""
    adam_epsilon: float
    """AdamW's ε: torch's default 1e-8, or the released code's ``transformers.AdamW`` default 1e-6."""
    squad_window: int | None
    """Tokens per SQuAD window (``None``: ``max_length``)."""
    squad_stride: int | None
    """Overlap of SQuAD windows (``None``: a quarter of the window)."""


RECIPES = {
    "modern": Recipe("modern", weight_decay=None, schedule="linear", clip=True, auto_precision_on_cuda="bf16",
                     adam_epsilon=1e-8, squad_window=None, squad_stride=None),
    # The released I-STAR code: transformers.AdamW(weight_decay=0) with its ε of 1e-6, no scheduler, no clipping,
    # torch.cuda.amp with a GradScaler, SQuAD features of 384 tokens with a 128-token stride.
    "paper": Recipe("paper", weight_decay=0.0, schedule="constant", clip=False, auto_precision_on_cuda="fp16",
                    adam_epsilon=1e-6, squad_window=384, squad_stride=128),
}
