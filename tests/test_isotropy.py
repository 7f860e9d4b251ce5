from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from IsoScore.IsoScore import IsoScore as reference_isoscore

from istar_tune.errors import IsotropyError
from istar_tune.isotropy import (
    average_cosine_similarity,
    explained_variance,
    isoscore,
    isoscore_star,
    isoscore_star_from_cov,
    masked_covariance,
    twonn_intrinsic_dimension,
)


def _anisotropic(n: int, d: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scales = torch.logspace(1, -1, d, dtype=torch.float64)
    return torch.randn(n, d, generator=gen, dtype=torch.float64) * scales + 3.0


def _low_rank(n: int, d: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    basis = torch.randn(3, d, generator=gen, dtype=torch.float64)
    return torch.randn(n, 3, generator=gen, dtype=torch.float64) @ basis


def _random_psd(d: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(d, 2 * d, generator=gen, dtype=torch.float64)
    return a @ a.T / (2 * d)


POINT_CLOUDS = {
    "gaussian": lambda n, d, s: torch.randn(n, d, generator=torch.Generator().manual_seed(s), dtype=torch.float64),
    "anisotropic": _anisotropic,
    "low_rank": _low_rank,
}


@pytest.mark.parametrize("kind", sorted(POINT_CLOUDS))
@pytest.mark.parametrize(("n", "d"), [(10, 64), (50, 128), (200, 16), (1000, 64)])
@pytest.mark.parametrize("zeta", [0.0, 0.2, 0.8])
@pytest.mark.parametrize("target", ["identity", "psd"])
def test_closed_form_matches_released_svd_formula(released_isoscore_star, kind, n, d, zeta, target):
    points = POINT_CLOUDS[kind](n, d, n + d)
    shrink = None if target == "identity" else _random_psd(d, d)
    ours = isoscore_star(points, shrink, zeta)
    released = released_isoscore_star(points, shrink, zeta)
    assert ours.dtype == torch.float64
    assert ours.item() == pytest.approx(released.item(), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize(("n", "d"), [(20, 50), (500, 30), (3000, 8)])
def test_vanilla_isoscore_matches_reference_package(n, d):
    points = _anisotropic(n, d, 7).numpy()
    ours = isoscore(points)
    assert ours.item() == pytest.approx(float(reference_isoscore(points)), rel=1e-6, abs=1e-12)
    # ζ = 0 IsoScore* is the vanilla IsoScore.
    assert isoscore_star(points).item() == pytest.approx(ours.item(), rel=1e-9)


PAPER_VARIANCES = torch.tensor([10.0, 6.0, 4.0, 4.0] + [1.0] * 764, dtype=torch.float64)


def test_paper_check_value_from_covariance():
    assert isoscore_star_from_cov(torch.diag(PAPER_VARIANCES)).item() == pytest.approx(0.867, abs=5e-4)


def test_paper_check_value_from_samples_and_small_sample_bias():
    gen = torch.Generator().manual_seed(0)
    std = PAPER_VARIANCES.sqrt().float()
    large = torch.randn(100_000, 768, generator=gen) * std
    score_large = isoscore_star(large).item()
    assert score_large == pytest.approx(0.86, abs=0.01)
    score_small = isoscore_star(large[:5_000]).item()
    assert score_small < score_large - 0.05  # IsoScore underestimates isotropy when n is not >> d


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(3, 60),
    d=st.integers(2, 24),
    seed=st.integers(0, 10_000),
    scale=st.floats(1e-3, 1e3),
    shift=st.floats(-100, 100),
    zeta=st.sampled_from([0.0, 0.3]),
)
def test_invariant_to_rotation_scaling_translation_and_bounded(n, d, seed, scale, shift, zeta):
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(n, d, generator=gen, dtype=torch.float64) * torch.rand(d, generator=gen, dtype=torch.float64)
    rotation, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    base = isoscore_star(points, zeta=zeta).item()
    moved = points @ rotation * scale + shift
    # Σ_S = I is rotation invariant; scaling must scale Σ_S with the points for a fair comparison.
    shrink = torch.eye(d, dtype=torch.float64) * scale**2
    assert 0.0 <= base <= 1.0
    assert isoscore_star(moved, shrink, zeta).item() == pytest.approx(base, rel=1e-7, abs=1e-9)
    assert isoscore(moved).item() == pytest.approx(isoscore(points).item(), rel=1e-6, abs=1e-9)


def test_extremes():
    gen = torch.Generator().manual_seed(1)
    line = torch.randn(500, 1, generator=gen, dtype=torch.float64) * torch.ones(1, 32, dtype=torch.float64)
    assert isoscore_star(line).item() == pytest.approx(0.0, abs=1e-12)
    assert isoscore_star_from_cov(torch.eye(32)).item() == pytest.approx(1.0)
    assert isoscore_star(line, zeta=1.0).item() == pytest.approx(1.0)


@pytest.mark.parametrize("cloud", ["rank1", "constant", "repeated_eigenvalues"])
@pytest.mark.parametrize("zeta", [0.0, 0.2])
def test_gradients_are_finite_on_degenerate_clouds(cloud, zeta):
    gen = torch.Generator().manual_seed(2)
    if cloud == "rank1":
        points = torch.randn(40, 1, generator=gen) * torch.randn(1, 16, generator=gen)
    elif cloud == "constant":
        points = torch.ones(40, 16) * 3.0
    else:
        points = torch.randn(40, 16, generator=gen) @ torch.linalg.qr(torch.randn(16, 16, generator=gen))[0]
        points = points / points.std(dim=0)  # every variance equal: fully repeated eigenvalues
    points.requires_grad_(True)
    score = isoscore_star(points, zeta=zeta)
    score.backward()
    assert torch.isfinite(score)
    assert torch.isfinite(points.grad).all()
    if cloud == "constant" and zeta == 0.0:
        assert score.item() == 0.0  # defined value: no variance at all


def test_analytic_gradient_matches_numerical_gradient():
    gen = torch.Generator().manual_seed(3)
    points = torch.randn(12, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1], dtype=torch.float64)
    shrink = _random_psd(5, 4).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p, s: isoscore_star(p, s, 0.3, mask), (points, shrink))
    assert torch.autograd.gradcheck(lambda p: isoscore_star(p), (points,))


def test_analytic_gradient_matches_autograd_of_released_formula(released_isoscore_star):
    points = _anisotropic(80, 20, 5).requires_grad_(True)
    released_isoscore_star(points, None, 0.2).backward()
    expected = points.grad.clone()
    points.grad = None
    isoscore_star(points, zeta=0.2).backward()
    torch.testing.assert_close(points.grad, expected, rtol=1e-6, atol=1e-12)


def test_mask_equals_dropping_rows():
    points = _anisotropic(30, 6, 9)
    mask = torch.zeros(30)
    mask[::3] = 1
    kept = points[mask.bool()]
    assert isoscore_star(points, zeta=0.2, mask=mask).item() == pytest.approx(
        isoscore_star(kept, zeta=0.2).item(), rel=1e-10
    )
    torch.testing.assert_close(masked_covariance(points, mask), torch.cov(kept.T))


def test_computes_in_float32_for_half_inputs():
    points = _anisotropic(64, 16, 11)
    score = isoscore_star(points.to(torch.bfloat16), zeta=0.2)
    assert score.dtype == torch.float32
    assert score.item() == pytest.approx(isoscore_star(points.to(torch.bfloat16).double(), zeta=0.2).item(), rel=1e-5)


def test_numpy_input_and_bad_inputs_raise_clear_errors():
    assert isinstance(isoscore_star(np.random.default_rng(0).normal(size=(10, 4))), torch.Tensor)
    with pytest.raises(IsotropyError, match="at least 2 points"):
        isoscore_star(torch.randn(1, 8))
    with pytest.raises(IsotropyError, match="at least 2 real tokens"):
        isoscore_star(torch.randn(5, 8), mask=torch.zeros(5))
    with pytest.raises(IsotropyError, match="NaN"):
        isoscore_star(torch.full((5, 8), float("nan")))
    with pytest.raises(IsotropyError, match="NaN"):
        isoscore(torch.full((5, 8), float("nan")))
    with pytest.raises(IsotropyError, match=r"zeta must lie in \[0, 1\], got 1.5"):
        isoscore_star(torch.randn(5, 8), zeta=1.5)
    with pytest.raises(IsotropyError, match=r"\(8, 8\)"):
        isoscore_star(torch.randn(5, 8), torch.eye(4), 0.2)
    with pytest.raises(IsotropyError, match="2-D"):
        isoscore_star(torch.randn(5))


def test_average_cosine_similarity_matches_pairwise_definition():
    points = _anisotropic(25, 7, 12)
    unit = points / points.norm(dim=1, keepdim=True)
    sims = unit @ unit.T
    expected = (sims.sum() - sims.diagonal().sum()) / (25 * 24)
    assert average_cosine_similarity(points).item() == pytest.approx(expected.item(), rel=1e-10)


def test_explained_variance_matches_eigenvalues():
    points = _anisotropic(200, 10, 13)
    eig = torch.linalg.eigvalsh(torch.cov(points.T)).flip(0)
    expected = torch.cumsum(eig, 0)[:3] / eig.sum()
    torch.testing.assert_close(explained_variance(points, 3), expected)
    with pytest.raises(IsotropyError, match="k must lie"):
        explained_variance(points, 11)


def test_streamed_measures_equal_the_measures_of_all_points():
    from istar_tune.isotropy import cosine_similarity_from_sum, explained_variance_from_cov
    from istar_tune.shrinkage import StreamingCovariance

    points = _anisotropic(300, 9, 21)
    stream = StreamingCovariance(9, budget=10**6)
    unit_sum = torch.zeros(9, dtype=torch.float64)
    for chunk in points.split(64):  # as analyze streams a validation set batch by batch
        stream.update(chunk)
        unit_sum += torch.nn.functional.normalize(chunk.double(), dim=1).sum(dim=0)
    torch.testing.assert_close(explained_variance_from_cov(stream.covariance(), 3).double(),
                               explained_variance(points, 3).double())
    assert cosine_similarity_from_sum(unit_sum, 300).item() == pytest.approx(
        average_cosine_similarity(points).item(), rel=1e-9)


@pytest.mark.parametrize("true_dim", [2, 5])
def test_twonn_recovers_dimension_of_a_linear_manifold(true_dim):
    gen = torch.Generator().manual_seed(true_dim)
    latent = torch.rand(2000, true_dim, generator=gen, dtype=torch.float64)
    embed = torch.randn(true_dim, 30, generator=gen, dtype=torch.float64)
    estimate = twonn_intrinsic_dimension(latent @ embed)
    assert estimate == pytest.approx(true_dim, rel=0.15)
    assert math.isfinite(twonn_intrinsic_dimension(torch.cat([latent, latent]) @ embed))  # duplicates dropped


def test_blocked_gram_path_matches_plain_product(released_isoscore_star):
    from istar_tune.isotropy import _gram

    x = torch.randn(20_000, 64, dtype=torch.float64)  # large enough for the two-block path
    torch.testing.assert_close(_gram(x), x.T @ x)
    assert isoscore_star(x).item() == pytest.approx(released_isoscore_star(x, None, 0.0).item(), rel=1e-9)
