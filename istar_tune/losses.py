"""Regularisation penalties on a model's hidden states: pure functions, tensors in, tensors out.

* I-STAR: ``λ · (1 − IsoScore*(X̃, ζ, Σ_S))`` with X̃ the union of the token embeddings of all hidden layers
  (the embedding-lookup output excluded) or of one chosen layer.
* CosReg (Gao et al. 2019): ``λ · (1/M²) Σ_i Σ_{j≠i} x̂_iᵀ x̂_j`` over the M last-layer token embeddings.

Padding positions are excluded by default; ``include_padding=True`` keeps them, as the released I-STAR code does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from istar_tune.errors import ConfigError
from istar_tune.isotropy import isoscore_star
from istar_tune.methods import COSINE, ISOSCORE, get_method


def layer_points(
    hidden_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor | None,
    layer: int | None = None,
    include_padding: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token points of the hidden layers and their mask.

    ``hidden_states`` is the model's tuple of L + 1 tensors (B, T, d), the embedding output first. ``layer=None``
    takes the union of layers 1..L; ``layer=i`` takes layer i (1-based; negative counts from the last).
    Returns ``(points (N, d), mask (N,) or None)``.
    """
    num_layers = len(hidden_states) - 1
    if num_layers < 1:
        raise ConfigError(f"the model returned {len(hidden_states)} hidden-state tensors; need at least 2")
    if layer is None:
        stacked = torch.stack(tuple(hidden_states[1:]))  # (L, B, T, d)
    else:
        index = layer if layer > 0 else num_layers + 1 + layer
        if not 1 <= index <= num_layers:
            raise ConfigError(f"layer must be in 1..{num_layers} or -{num_layers}..-1, got {layer}")
        stacked = hidden_states[index].unsqueeze(0)  # (1, B, T, d)
    points = stacked.reshape(-1, stacked.shape[-1])  # (L·B·T, d)
    if include_padding or attention_mask is None:
        return points, None
    mask = attention_mask.unsqueeze(0).expand(stacked.shape[:-1]).reshape(-1)  # (L·B·T,)
    return points, mask


def istar_penalty(
    hidden_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor | None,
    lam: float,
    zeta: float,
    shrinkage_cov: torch.Tensor | None = None,
    layer: int | None = None,
    include_padding: bool = False,
) -> torch.Tensor:
    """``λ · (1 − IsoScore*)`` of the (all-layer or one-layer) token cloud, computed in float32."""
    points, mask = layer_points(hidden_states, attention_mask, layer, include_padding)
    return lam * (1.0 - isoscore_star(points, shrinkage_cov, zeta, mask))


def cosreg_penalty(
    last_hidden: torch.Tensor,
    attention_mask: torch.Tensor | None,
    lam: float = 1.0,
    include_padding: bool = False,
) -> torch.Tensor:
    """CosReg: ``λ/M² · Σ_{i≠j} cos(x_i, x_j)`` over the M (real) tokens of ``last_hidden`` (B, T, d).

    Uses ``Σ_{i≠j} x̂_iᵀx̂_j = ‖Σ_i x̂_i‖² − M``: O(M·d), no M × M matrix.
    """
    with torch.autocast(device_type=last_hidden.device.type, enabled=False):
        points = last_hidden.reshape(-1, last_hidden.shape[-1]).float()  # (B·T, d)
        unit = torch.nn.functional.normalize(points, dim=1)  # (B·T, d)
        if attention_mask is not None and not include_padding:
            weights = attention_mask.reshape(-1).to(unit.dtype)  # (B·T,)
            unit = unit * weights[:, None]
            count = weights.sum()
        else:
            count = torch.full((), float(unit.shape[0]), device=unit.device)  # a fill, not a host copy: capturable
        total = unit.sum(dim=0)  # (d,)
        return lam * (total @ total - count) / (count * count)


def penalty(
    method: str,
    hidden_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor | None,
    *,
    lam: float,
    zeta: float = 0.0,
    shrinkage_cov: torch.Tensor | None = None,
    layer: int | None = None,
    include_padding: bool = False,
) -> torch.Tensor | None:
    """The method's penalty to add to the task loss, or ``None`` when there is none (base, or λ = 0).

    Returning ``None`` for λ = 0 keeps the total loss exactly equal to the task loss.
    """
    kind = get_method(method).penalty
    if lam == 0 or kind not in (ISOSCORE, COSINE):
        return None
    if kind == ISOSCORE:
        return istar_penalty(hidden_states, attention_mask, lam, zeta, shrinkage_cov, layer, include_padding)
    return cosreg_penalty(hidden_states[-1], attention_mask, lam, include_padding)
