"""Σ_S, the shrinkage covariance of I-STAR: the covariance of up to ``shrinkage_tokens`` training tokens,
drawn in a seeded random order of the whole training set, a fresh draw per use (before training, after each epoch);
and the token points the penalty, Σ_S and the eval IsoScore* all read (:func:`token_cloud`).
"""

from __future__ import annotations

import torch

from istar_tune.losses import layer_points
from istar_tune.models import (
    hidden_size,
)
from istar_tune.random_streams import SIGMA_DRAW, stream_seed
from istar_tune.shrinkage import StreamingCovariance
from istar_tune.training.forward import forward_pass
from istar_tune.training.setup import Run

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


def token_cloud(run: Run, hidden_states, attention_mask) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token points I-STAR regularises (all layers or ``layer``; padding masked unless ``include_padding``):
    the same selection for Σ_S, the penalty and the eval IsoScore*."""
    return layer_points(hidden_states, attention_mask, run.hparams.layer, run.hparams.include_padding)
