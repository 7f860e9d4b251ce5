"""IsoLayer (the second paper): a d × d layer between the sentence embedding and the task head.

Stage 1 fine-tunes the model as Base does (``train.py``), or starts from ``init_checkpoint``. Stage 2 freezes the
encoder and the head, inserts one identity-initialised linear layer on the sentence embedding that feeds the head,
and trains only that layer with ``α·L̂1 + (1 − α)·L̂2``: L1 the task loss, L2 = log(1/IsoScore) of the batch's
sentence embeddings after the layer, both normalised by :class:`LossBalancer`. Stage 2 runs through the same
epoch loop as every method (:func:`istar_tune.train.train_epoch`).

Where the sentence embedding is found: the head is the part of the model outside ``model.base_model``; its first
linear layer (in module order) takes the sentence embedding — BERT's and ALBERT's pooler output, DistilBERT's
[CLS] state before ``pre_classifier``. The layer is applied as a forward pre-hook on that module.
"""

from __future__ import annotations

import math

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


def isolayer_loss_fn(run, hook: IsoLayerHook, alpha: float):
    """batch → (α·L̂1 + (1 − α)·L̂2, L1, L2) for :func:`istar_tune.train.train_epoch`."""
    balancer = LossBalancer()

    def compute(batch):
        with run.autocast():
            outputs = run.model(**batch)
        task_loss = outputs.loss.float()
        score = isoscore_star(hook.embeddings)  # ζ = 0: the batch's IsoScore, differentiable
        iso_loss = -torch.log(score.clamp_min(MIN_ISOSCORE))
        task_hat, iso_hat = balancer([task_loss, iso_loss])
        return alpha * task_hat + (1 - alpha) * iso_hat, task_loss, iso_loss

    return compute


@torch.no_grad()
def sentence_space(run, hook: IsoLayerHook) -> dict[str, float]:
    """Task metric, IsoScore and EV_1..EV_3 of the validation set's sentence embeddings (after the layer)."""
    run.model.eval()
    embeddings, logits = [], []
    for batch in run.loader(run.data.validation, run.settings.eval_batch_size):
        batch = run.to_device(batch)
        with run.autocast():
            outputs = run.model(**{k: v for k, v in batch.items() if k != "labels"})
        embeddings.append(hook.embeddings.float().cpu())
        logits.append(outputs.logits.float().cpu().numpy())
    points = torch.cat(embeddings)  # (n_eval, d)
    metrics = classification_metrics(run.task, np.concatenate(logits), run.data.labels)
    ev = explained_variance(points, 3)
    return {**metrics, "sentence_isoscore": float(isoscore(points)),
            **{f"sentence_ev{k + 1}": float(ev[k]) for k in range(3)}}


def run_stage_two(run, result, reporter) -> None:
    """Freeze the fine-tuned model, train the inserted layer, report per epoch, record before/after."""
    from istar_tune.train import make_optimizer, train_epoch

    hp = run.hparams
    for param in run.model.parameters():
        param.requires_grad_(False)
    hook = IsoLayerHook(run.model)
    try:
        before = sentence_space(run, hook)
        named = list(hook.layer.named_parameters())
        optimizer, scheduler, scaler = make_optimizer(run, named, hp.isolayer_learning_rate, hp.isolayer_epochs,
                                                      hp.warmup_ratio)
        loss_fn = isolayer_loss_fn(run, hook, hp.alpha)
        stage_one_epochs = len(result.epochs)
        after = before
        for stage_epoch in range(1, hp.isolayer_epochs + 1):
            epoch = stage_one_epochs + stage_epoch
            losses = train_epoch(run, loss_fn, [p for _, p in named], optimizer, scheduler, scaler, epoch,
                                 f"isolayer {stage_epoch}/{hp.isolayer_epochs}", train_modules=hook.layer)
            after = sentence_space(run, hook)
            record = {"epoch": epoch, "stage": 2, **after, "train_loss": losses["train_loss"],
                      "task_loss": losses["task_loss"], "isolayer_l2": losses["penalty"]}
            result.epochs.append(record)
            if record[run.task.metric] >= result.best.get(run.task.metric, -math.inf):
                result.best_epoch = epoch
            if reporter is not None:
                reporter(record, None)
        result.extra["isolayer"] = {"before": before, "after": after}
    finally:
        hook.remove()
