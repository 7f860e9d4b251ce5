"""A regression task's scores trained as z-scores: the training split's mean and deviation standardise every split's
labels (so a 0-100 scale trains as a 0-5 one does: the same z-scores), and a saved model's output layer has the scale
folded into it (``w' = σ·w``, ``b' = σ·b + μ``), so ``from_pretrained``, a ``transformers`` pipeline and ``analyze``
predict in the data's own scale. Pearson and Spearman, the regression metrics, are unchanged by the standardisation
(both are invariant under a positive affine map); an eval loss is in z-units.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

SCALE_ATTRIBUTE = "istar_tune_label_scale"
"""The saved model's ``config.json`` key recording the scale folded into its output layer (``{mean, std}``)."""


@dataclass(frozen=True)
class LabelScale:
    mean: float
    std: float

    @classmethod
    def of(cls, scores: Sequence[float]) -> LabelScale:
        """The training scores' mean and (population) deviation; a deviation of 0 (one score) is taken as 1."""
        count = len(scores)
        mean = math.fsum(scores) / count if count else 0.0
        std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / count) if count else 1.0
        return cls(mean, std if std > 0 else 1.0)

    def standardise(self, scores: Sequence[float]) -> list[float]:
        return [(s - self.mean) / self.std for s in scores]

    def as_config(self) -> dict[str, float]:
        return {"mean": self.mean, "std": self.std}


def output_layer(model: torch.nn.Module) -> torch.nn.Linear:
    """The layer whose single output is a regression model's prediction: the last ``Linear`` with one output."""
    found = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == 1]
    if not found:
        raise ValueError(f"{type(model).__name__} has no linear layer with one output to hold a regression's scale")
    return found[-1]


@torch.no_grad()
def fold(model: torch.nn.Module, scale: LabelScale) -> None:
    """Make the output layer predict ``μ + σ·z`` where it predicted ``z``."""
    layer = output_layer(model)
    layer.weight.mul_(scale.std)
    if layer.bias is not None:
        layer.bias.mul_(scale.std).add_(scale.mean)


@torch.no_grad()
def unfold(model: torch.nn.Module, scale: LabelScale) -> None:
    """The inverse of :func:`fold`: back to z-scores (a saved model trained further)."""
    layer = output_layer(model)
    if layer.bias is not None:
        layer.bias.sub_(scale.mean).div_(scale.std)
    layer.weight.div_(scale.std)


@contextlib.contextmanager
def folded(model: torch.nn.Module, scale: LabelScale | None) -> Iterator[None]:
    """While saving: the scale folded into the output layer and recorded in the config; then back to z-scores."""
    if scale is None:
        yield
        return
    saved = {k: v.detach().clone() for k, v in output_layer(model).state_dict().items()}
    fold(model, scale)
    setattr(model.config, SCALE_ATTRIBUTE, scale.as_config())
    try:
        yield
    finally:
        output_layer(model).load_state_dict(saved)  # bit for bit the weights training goes on with
        if hasattr(model.config, SCALE_ATTRIBUTE):
            delattr(model.config, SCALE_ATTRIBUTE)


def saved_scale(model: torch.nn.Module) -> LabelScale | None:
    """The scale a loaded model's output layer holds (``None``: it predicts what it was trained on)."""
    values = getattr(model.config, SCALE_ATTRIBUTE, None)
    return LabelScale(float(values["mean"]), float(values["std"])) if isinstance(values, dict) else None
