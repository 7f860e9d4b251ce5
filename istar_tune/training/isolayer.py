"""IsoLayer (the second paper): a d × d layer between the sentence embedding and the task head.

Stage 1 fine-tunes the model as Base does (``loop.py``), or starts from ``init_checkpoint``. Stage 2 freezes the
encoder and the head, inserts one identity-initialised linear layer on the sentence embedding that feeds the head
(:class:`IsoLayerHook`), and trains only that layer with :class:`IsoLayerLoss`: ``α·L̂1 + (1 − α)·L̂2``, L1 the task
loss, L2 = log(1/IsoScore) of the batch's sentence embeddings after the layer, both normalised by
:class:`LossBalancer`. This module holds those pieces; stage 2 runs them through the same epoch loop as every method
(``loop.py``), which measures the sentence space before and after (:func:`sentence_space`, :class:`IsoLayerResult`).

Where the sentence embedding is found: the head is the part of the model outside ``model.base_model``; its first
linear layer (in module order) takes the sentence embedding — BERT's and ALBERT's pooler output, DistilBERT's
[CLS] state before ``pre_classifier``. The layer is applied as a forward pre-hook on that module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from istar_tune.errors import ConfigError
from istar_tune.isotropy import explained_variance, isoscore, isoscore_star
from istar_tune.metrics import classification_metrics

BALANCER_RATE = 0.15
MIN_ISOSCORE = 1e-8  # keeps log(1/IsoScore) finite for a collapsed batch


class LossBalancer:
    """Moving-average loss normalisation.

    At iteration k = 0, 1, 2, ...: the running means are initialised to the first losses at k = 0; each loss is
    normalised with the current means, ``L̂_i = L_i · L̄ / L̄_i`` with ``L̄`` the mean of the ``L̄_i``; then the means
    are updated, ``L̄_i ← L_i·s/(1 + k) + L̄_i·(1 − s/(1 + k))``. The means are statistics, not part of the graph.
    """

    def __init__(self, rate: float = BALANCER_RATE):
        self.rate = rate
        self.iteration = 0
        self.means: list[float] | None = None

    def __call__(self, losses: list[torch.Tensor]) -> list[torch.Tensor]:
        values = [float(loss.detach()) for loss in losses]
        if self.means is None:
            self.means = list(values)
        overall = sum(self.means) / len(self.means)
        normalised = [loss * (overall / mean) if mean != 0 else loss for loss, mean in zip(losses, self.means)]
        step = self.rate / (1 + self.iteration)
        self.means = [v * step + m * (1 - step) for v, m in zip(values, self.means)]
        self.iteration += 1
        return normalised


def head_input_module(model: torch.nn.Module) -> torch.nn.Linear:
    """The head's first linear layer: the module whose input is the sentence embedding."""
    base = model.base_model
    base_modules = {id(m) for m in base.modules()}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module) not in base_modules:
            return module
    raise ConfigError(f"cannot find a task head outside the encoder of {type(model).__name__}: IsoLayer needs a "
                      "sequence-classification model with a linear head")


class IsoLayerHook:
    """An identity-initialised d × d linear layer applied to the head's input; remembers the last output."""

    def __init__(self, model: torch.nn.Module):
        self.target = head_input_module(model)
        dim = self.target.in_features
        self.layer = torch.nn.Linear(dim, dim).to(self.target.weight.device)
        with torch.no_grad():
            self.layer.weight.copy_(torch.eye(dim))
            self.layer.bias.zero_()
        self.embeddings: torch.Tensor | None = None
        self._handle = self.target.register_forward_pre_hook(self._apply)

    def _apply(self, module, args):
        (features, *rest) = args
        self.embeddings = self.layer(features.to(self.layer.weight.dtype))  # (B, d)
        return (self.embeddings.to(features.dtype), *rest)

    def remove(self) -> None:
        self._handle.remove()


class IsoLayerLoss:
    """``α·L̂1 + (1 − α)·L̂2`` of a batch: L1 the task loss, L2 = log(1/IsoScore) of the batch's sentence embeddings
    after the layer (ζ = 0: the batch's own IsoScore, differentiable), both normalised by a :class:`LossBalancer`."""

    def __init__(self, alpha: float):
        self.alpha = alpha
        self.balancer = LossBalancer()

    def __call__(self, task_loss: torch.Tensor, embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the joint loss, L2) for a batch's task loss and its (B, d) sentence embeddings."""
        iso_loss = -torch.log(isoscore_star(embeddings).clamp_min(MIN_ISOSCORE))
        task_hat, iso_hat = self.balancer([task_loss, iso_loss])
        return self.alpha * task_hat + (1 - self.alpha) * iso_hat, iso_loss


@dataclass
class SentenceSpace:
    """What IsoLayer's paper reports of the validation set's sentence embeddings (after the layer)."""

    metrics: dict[str, float]
    """The task metric(s) of the model with the layer."""
    isoscore: float
    explained_variance: list[float]
    """EV_1..EV_3 (cumulative)."""

    def as_record(self) -> dict[str, float]:
        return {**self.metrics, "sentence_isoscore": self.isoscore,
                **{f"sentence_ev{k + 1}": v for k, v in enumerate(self.explained_variance)}}


@dataclass
class IsoLayerResult:
    """Stage 2's measurements: the sentence space before the layer trained (stage 1's model) and after."""

    before: SentenceSpace
    after: SentenceSpace


def sentence_space(task, embeddings: torch.Tensor, logits: np.ndarray, labels) -> SentenceSpace:
    """Task metric, IsoScore and EV_1..EV_3 of (n, d) sentence embeddings and the model's (n, classes) logits."""
    ev = explained_variance(embeddings, 3)
    return SentenceSpace(metrics=classification_metrics(task, logits, labels), isoscore=float(isoscore(embeddings)),
                         explained_variance=[float(v) for v in ev])
