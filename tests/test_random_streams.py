"""Every random stream of a run is an independent draw: no seed repeats another seed's order at another epoch."""

from __future__ import annotations

import inspect

import torch

from istar_tune.random_streams import DATA_ORDER, SIGMA_DRAW, stream_seed


def _order(seed: int, purpose: str, index: int) -> tuple[int, ...]:
    generator = torch.Generator().manual_seed(stream_seed(seed, purpose, index))
    return tuple(torch.randperm(64, generator=generator).tolist())


def test_five_seeds_over_three_epochs_draw_fifteen_orders():
    orders = {_order(seed, DATA_ORDER, epoch) for seed in range(1, 6) for epoch in range(1, 4)}
    assert len(orders) == 15  # seed + epoch gave 7: seed s at epoch k was seed s + 1 at epoch k − 1
    assert _order(1, DATA_ORDER, 2) != _order(2, DATA_ORDER, 1)
    assert _order(1, DATA_ORDER, 1) != _order(1, SIGMA_DRAW, 1)  # purposes are separate streams
    assert _order(3, DATA_ORDER, 2) == _order(3, DATA_ORDER, 2)  # and each is reproducible


def test_a_stream_seed_is_stable_and_in_the_range_torch_takes():
    assert stream_seed(42, DATA_ORDER, 1) == 1940369029670299987  # SHA-256: the same on every machine
    assert all(0 <= stream_seed(s, p, i) < 2**63 for s in (0, 2**32 - 1) for p in (DATA_ORDER, SIGMA_DRAW)
               for i in (0, 7))


def test_the_training_epoch_and_the_sigma_pass_draw_from_these_streams():
    from istar_tune.training import epoch, sigma

    assert "stream_seed(run.hparams.seed, DATA_ORDER, epoch)" in inspect.getsource(epoch.epoch_batches)
    assert "epoch_batches(run, epoch" in inspect.getsource(epoch.train_epoch)
    assert "stream_seed(seed, SIGMA_DRAW, draw)" in inspect.getsource(sigma.shrinkage_order)
