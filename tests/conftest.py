from __future__ import annotations

import math

import torch


def released_isoscore_star(points: torch.Tensor, shrinkage_cov: torch.Tensor | None, zeta: float) -> torch.Tensor:
    """The released I-STAR formula, written out independently: svdvals of Σ_ζ and the paper's normalisation."""
    d = points.shape[1]
    cov = torch.cov(points.T)
    if zeta > 0:
        target = torch.eye(d, dtype=points.dtype) if shrinkage_cov is None else shrinkage_cov
        cov = (1 - zeta) * cov + zeta * target
    pcs = torch.linalg.svdvals(cov)
    normalised = pcs * math.sqrt(d) / torch.linalg.vector_norm(pcs)
    defect = torch.linalg.vector_norm(normalised - 1) / math.sqrt(2 * (d - math.sqrt(d)))
    return ((d - defect**2 * (d - math.sqrt(d))) ** 2 - d) / (d * (d - 1))

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
GLUE_TINY = SHARED / "glue-tiny"
GLUE = SHARED / "glue"


@pytest.fixture(scope="session")
def glue_tiny() -> Path:
    if not GLUE_TINY.is_dir():
        pytest.fail(f"shared test data not found at {GLUE_TINY}: clone the project beside ../shared")
    return GLUE_TINY
