"""Every random stream of a run seeded from a hash of (the run's seed, the stream's purpose, its index), so the
streams of different seeds, purposes and epochs are independent draws: seed s at epoch k never repeats another
seed's order at another epoch (``seed + epoch`` did: seed 1's epoch 2 was seed 2's epoch 1)."""

from __future__ import annotations

import hashlib

DATA_ORDER = "data order"
"""The order of the training examples in an epoch (index: the epoch)."""
SIGMA_DRAW = "sigma draw"
"""The order in which a Σ_S pass reads the training set (index: the draw; 0 before training, k after epoch k)."""


def stream_seed(seed: int, purpose: str, index: int = 0) -> int:
    """The seed of the random stream ``purpose``/``index`` of a run seeded ``seed``: 63 bits of SHA-256, the same on
    every machine and Python (unlike ``hash``)."""
    digest = hashlib.sha256(f"{int(seed)}|{purpose}|{int(index)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**63
