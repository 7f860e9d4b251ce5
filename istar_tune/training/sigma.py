"""Σ_S, the shrinkage covariance of I-STAR: the covariance of up to ``shrinkage_tokens`` training tokens,
drawn in a seeded random order of the whole training set, a fresh draw per use (before training, after each epoch);
and the token points the penalty, Σ_S and the eval IsoScore* all read (:func:`token_cloud`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from istar_tune.losses import layer_points
from istar_tune.models import (
    hidden_size,
)
from istar_tune.random_streams import SIGMA_DRAW, stream_seed
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.training.forward import forward_pass
from istar_tune.training.run import Run

# ------------------------------------------------------------------------------------- the pieces of an epoch


def shrinkage_order(size: int, seed: int, draw: int) -> list[int]:
    """The order in which the Σ_S pass ``draw`` reads the training set: a seeded random permutation, a fresh one
    per draw (draw 0 before training, draw k after epoch k), the same for the same seed."""
    generator = torch.Generator().manual_seed(stream_seed(seed, SIGMA_DRAW, draw))
    return torch.randperm(size, generator=generator).tolist()


def estimate_shrinkage(run: Run, draw: int = 0) -> torch.Tensor:
    """Σ_S: covariance of up to ``shrinkage_tokens`` training tokens drawn in a seeded random order of the whole
    training set (:func:`shrinkage_order`), from the points the penalty sees (all layers, or ``layer``; padding
    as ``include_padding``); eval mode, no gradient, in float32 whatever the training precision (as the released
    code: its Σ_S pass ran outside autocast)."""
    estimator = StreamingCovariance(hidden_size(run.model), budget=run.settings.shrinkage_tokens)
    order = shrinkage_order(len(run.data.train), run.hparams.seed, draw)
    # Its own generator: the pass must not draw from the global RNG (a resumed run repeats it before training).
    loader = torch.utils.data.DataLoader(run.data.train, batch_size=run.settings.eval_batch_size, sampler=order,
                                         collate_fn=run.collate, generator=torch.Generator().manual_seed(draw))
    for batch, outputs in forward_pass(run.model, loader, run.device):  # no autocast: float32
        points, mask = token_cloud(run, outputs.hidden_states, batch["attention_mask"])
        estimator.update(points, mask)
        if estimator.full:
            break
    return estimator.covariance(torch.float32)


SIGMA_CACHE = "sigma-cache"
"""The folder beside a search's trials where the pretrained model's Σ_S is kept, one file per key."""
NOT_IN_SIGMA = frozenset({
    "method", "learning_rate", "batch_size", "epochs", "lam", "zeta", "grad_accum", "warmup_ratio", "weight_decay",
    "alpha", "isolayer_learning_rate", "isolayer_epochs",  # hyperparameters the pretrained model's Σ_S never sees
    "output_dir", "max_eval_samples", "eval_zeta", "star_sigma", "isoscore_star_every_epoch", "precision",
    "max_grad_norm", "save_checkpoint", "progress", "heartbeat_s", "patience", "checkpoint",  # settings after it
})
"""What does not change Σ_S of the pretrained model (draw 0: eval mode, float32, its own random order); every other
hyperparameter and setting is part of its key, so one added later changes the key rather than reusing a wrong Σ_S."""


def shrinkage_key(run: Run) -> str:
    """What determines Σ_S of the pretrained model, hashed: the model, the task's definition and data, the seed (the
    draw's order, the held-out split, a random-init model's weights), the token selection and budget, the device
    and the library versions."""
    import transformers

    values = {**dataclasses.asdict(run.hparams), **dataclasses.asdict(run.settings)}
    key = {k: v for k, v in sorted(values.items()) if k not in NOT_IN_SIGMA}
    key.update(task=dataclasses.asdict(run.task), device=run.device.type, torch=torch.__version__,
               transformers=transformers.__version__, train_examples=len(run.data.train))
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]


def reused_shrinkage(run: Run, folder: str | os.PathLike | None, estimate: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Σ_S of the pretrained model, the same for every configuration of a model × task × seed × settings: read from
    ``folder`` when a trial computed it already, else ``estimate()`` and kept there (written whole or not at all; a
    file that cannot be read is computed again). ``folder`` ``None``: always estimated."""
    if folder is None:
        return estimate()
    path = Path(folder) / f"{shrinkage_key(run)}.pt"
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - absent, partial or unreadable: estimated again
        pass
    covariance, handle = estimate(), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as handle:
            torch.save(covariance.detach().cpu(), handle)
        os.replace(handle.name, path)
    except OSError:  # a full or read-only disk costs only the reuse
        if handle is not None:
            Path(handle.name).unlink(missing_ok=True)
    return covariance


def token_cloud(run: Run, hidden_states, attention_mask) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token points I-STAR regularises (all layers or ``layer``; padding masked unless ``include_padding``):
    the same selection for Σ_S, the penalty and the eval IsoScore*."""
    return layer_points(hidden_states, attention_mask, run.hparams.layer, run.hparams.include_padding)
