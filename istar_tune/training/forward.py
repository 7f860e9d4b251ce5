"""One pass of a model over a split, shared by everything that reads a model's representations without training
it: Σ_S (``train.estimate_shrinkage``), evaluation (``train.evaluate``), IsoLayer's sentence-space measurements and
``analyze``. Each consumer takes the batches and outputs it needs (hidden states, logits) from :func:`forward_pass`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

LABEL_KEYS = ("labels", "start_positions", "end_positions")


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch without its labels: what the model's forward takes when no loss is wanted."""
    return {k: v for k, v in batch.items() if k not in LABEL_KEYS}


@torch.no_grad()
def forward_pass(model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]], device: torch.device | str,
                 autocast: Callable[[], Any] | None = None,
                 hidden_states: bool = True) -> Iterator[tuple[dict[str, torch.Tensor], Any]]:
    """Run ``model`` in evaluation mode, without gradients, over ``batches``; yield each batch (on ``device``) and
    the model's outputs (``hidden_states``: embeddings then every layer, each (B, T, d)). A consumer that has what it
    needs stops the pass by leaving the loop."""
    model.eval()
    for batch in batches:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast() if autocast is not None else contextlib.nullcontext():
            outputs = model(**model_inputs(batch), output_hidden_states=hidden_states)
        yield batch, outputs
