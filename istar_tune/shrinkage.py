"""Streaming covariance Σ_S for I-STAR's RDA shrinkage.

Feed hidden-state batches (with their attention masks) until a point budget is reached. The estimator keeps a
count, a mean and a centred scatter matrix in float64 on the batches' device (Chan et al.'s pairwise update:
stable where raw sums would cancel, since transformer hidden states carry large per-dimension offsets), never
stores the points, and merges with another estimator (one per data-parallel worker).
"""

from __future__ import annotations

import torch

from istar_tune.errors import IsotropyError
from istar_tune.methods import SHRINKAGE_TOKENS


class StreamingCovariance:
    """Running covariance of up to ``budget`` d-dimensional points.

    ``update(hidden, mask)`` takes ``hidden`` of shape (..., d) and an optional ``mask`` of shape (...) (1 = real
    token); whole batches are taken until the budget is met, and the batch that meets it gives an evenly spaced
    subset of its rows (so a cut inside a batch of every layer's tokens keeps tokens of every layer, not only the
    first layers').
    """

    def __init__(self, dim: int, budget: int = SHRINKAGE_TOKENS, device: torch.device | str | None = None):
        if dim < 1:
            raise IsotropyError(f"dimension must be positive, got {dim}")
        if budget < 2:
            raise IsotropyError(f"the point budget must be at least 2, got {budget}")
        self.dim = dim
        self.budget = int(budget)
        self.count = 0
        self._device = torch.device(device) if device is not None else None
        self._mean: torch.Tensor | None = None  # (d,) float64
        self._scatter: torch.Tensor | None = None  # (d, d) float64, Σ (x − mean)(x − mean)ᵀ

    @property
    def full(self) -> bool:
        """True once ``budget`` points have been seen: further updates are ignored."""
        return self.count >= self.budget

    @property
    def remaining(self) -> int:
        return max(0, self.budget - self.count)

    @torch.no_grad()
    def update(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Add the real rows of ``hidden`` (..., d); returns how many points were taken."""
        if hidden.shape[-1] != self.dim:
            raise IsotropyError(f"expected points of dimension {self.dim}, got shape {tuple(hidden.shape)}")
        if self.full:
            return 0
        points = hidden.reshape(-1, self.dim)  # (N, d)
        if mask is not None:
            if mask.shape != hidden.shape[:-1]:
                raise IsotropyError(
                    f"mask shape {tuple(mask.shape)} does not match the points' shape {tuple(hidden.shape[:-1])}"
                )
            points = points[mask.reshape(-1).bool()]  # (M, d) real tokens only
        if points.shape[0] > self.remaining:  # rows spread over the whole batch, none twice
            points = points[torch.arange(self.remaining, device=points.device) * points.shape[0] // self.remaining]
        points = points.to(torch.float64)
        taken = points.shape[0]
        if taken == 0:
            return 0
        batch_mean = points.mean(dim=0)
        centred = points - batch_mean
        self._merge_moments(taken, batch_mean, centred.T @ centred)
        return taken

    def _merge_moments(self, count: int, mean: torch.Tensor, scatter: torch.Tensor) -> None:
        if self._mean is None:
            self._device = self._device or mean.device
            self.count, self._mean, self._scatter = count, mean.to(self._device), scatter.to(self._device)
            return
        mean, scatter = mean.to(self._device), scatter.to(self._device)
        total = self.count + count
        delta = mean - self._mean  # (d,)
        self._mean = self._mean + delta * (count / total)
        self._scatter = self._scatter + scatter + torch.outer(delta, delta) * (self.count * count / total)
        self.count = total

    def merge(self, other: "StreamingCovariance") -> "StreamingCovariance":
        """Fold ``other``'s points into this estimator (exact; the budget is not re-applied). Returns self."""
        if other.dim != self.dim:
            raise IsotropyError(f"cannot merge estimators of dimension {self.dim} and {other.dim}")
        if other.count:
            self._merge_moments(other.count, other._mean, other._scatter)
        return self

    def mean(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The mean of the points seen, (d,)."""
        if self.count < 1:
            raise IsotropyError("the estimator has seen no points yet")
        return self._mean.to(dtype)

    def covariance(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The unbiased (count − 1) covariance, (d, d)."""
        if self.count < 2:
            raise IsotropyError(
                f"the shrinkage covariance needs at least 2 points, got {self.count}: feed more batches"
            )
        return (self._scatter / (self.count - 1)).to(dtype)

    def state_dict(self) -> dict:
        return {"dim": self.dim, "budget": self.budget, "count": self.count, "mean": self._mean,
                "scatter": self._scatter}

    @classmethod
    def from_state_dict(cls, state: dict) -> "StreamingCovariance":
        est = cls(state["dim"], state["budget"])
        est.count, est._mean, est._scatter = state["count"], state["mean"], state["scatter"]
        return est
