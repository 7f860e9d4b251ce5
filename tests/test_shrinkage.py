from __future__ import annotations

import pytest
import torch

from istar_tune.errors import IsotropyError
from istar_tune.shrinkage import StreamingCovariance


def _batches(seed: int, count: int = 5, d: int = 12):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(count):
        hidden = torch.randn(4, 9, d, generator=gen, dtype=torch.float64) * 3 + 50.0  # large offsets
        lengths = torch.randint(1, 10, (4,), generator=gen)
        mask = (torch.arange(9)[None, :] < lengths[:, None]).long()
        yield hidden, mask


def _stacked(batches):
    return torch.cat([h[m.bool()] for h, m in batches])


def test_equals_torch_cov_of_masked_points():
    batches = list(_batches(0))
    est = StreamingCovariance(12, budget=10_000)
    for hidden, mask in batches:
        est.update(hidden, mask)
    points = _stacked(batches)
    assert est.count == points.shape[0]
    torch.testing.assert_close(est.covariance(), torch.cov(points.T), rtol=1e-8, atol=0)


def test_merge_equals_single_estimator():
    first, second = list(_batches(1)), list(_batches(2))
    a, b = StreamingCovariance(12), StreamingCovariance(12)
    for hidden, mask in first:
        a.update(hidden, mask)
    for hidden, mask in second:
        b.update(hidden, mask)
    merged = a.merge(b)
    torch.testing.assert_close(merged.covariance(), torch.cov(_stacked(first + second).T), rtol=1e-8, atol=0)


def test_stops_at_budget_the_last_batch_giving_rows_spread_over_all_of_it():
    batches = list(_batches(3))
    est = StreamingCovariance(12, budget=50)
    taken = [est.update(hidden, mask) for hidden, mask in batches]
    assert est.count == 50 and est.full
    assert sum(taken) == 50 and taken[-1] == 0
    rows = [_stacked([b]) for b in batches]
    whole = sum(t == len(r) for t, r in zip(taken, rows))  # batches taken whole, then the one that met the budget
    cut, need = rows[whole], taken[whole]
    assert 0 < need < len(cut)
    index = torch.arange(need) * len(cut) // need  # evenly spaced over the batch, its last rows included
    assert index[-1] >= len(cut) - len(cut) / need - 1 and len(set(index.tolist())) == need
    spread = cut[index]
    expected = torch.cat([*rows[:whole], spread])
    torch.testing.assert_close(est.covariance(), torch.cov(expected.T), rtol=1e-8, atol=0)


def test_float32_input_is_accumulated_in_float64_and_without_mask():
    hidden = torch.randn(3, 7, 5) + 100.0
    est = StreamingCovariance(5)
    est.update(hidden)
    expected = torch.cov(hidden.reshape(-1, 5).double().T)
    torch.testing.assert_close(est.covariance(), expected, rtol=1e-8, atol=0)
    assert est.covariance(torch.float32).dtype == torch.float32


def test_state_dict_round_trip():
    est = StreamingCovariance(12)
    for hidden, mask in _batches(4):
        est.update(hidden, mask)
    again = StreamingCovariance.from_state_dict(est.state_dict())
    torch.testing.assert_close(again.covariance(), est.covariance())


def test_clear_errors():
    est = StreamingCovariance(4)
    with pytest.raises(IsotropyError, match="at least 2 points, got 0"):
        est.covariance()
    with pytest.raises(IsotropyError, match="dimension 4"):
        est.update(torch.randn(2, 3, 5))
    with pytest.raises(IsotropyError, match="mask shape"):
        est.update(torch.randn(2, 3, 4), torch.ones(2, 4))
    with pytest.raises(IsotropyError, match="budget"):
        StreamingCovariance(4, budget=1)
