from __future__ import annotations

import pytest
import torch

from istar_tune.errors import ConfigError
from istar_tune.losses import cosreg_penalty, istar_penalty, layer_points, penalty


def _hidden(num_layers=3, batch=2, seq=5, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    states = tuple(torch.randn(batch, seq, d, generator=gen, dtype=torch.float64) for _ in range(num_layers + 1))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    return states, mask


def test_istar_penalty_is_lambda_times_one_minus_isoscore_star_of_all_layer_real_tokens(released_isoscore_star):
    states, mask = _hidden()
    shrink = torch.eye(8, dtype=torch.float64) * 2
    union = torch.cat([h[mask.bool()] for h in states[1:]])  # embedding output excluded, padding excluded
    expected = -3.0 * (1 - released_isoscore_star(union, shrink, 0.4))
    got = istar_penalty(states, mask, lam=-3.0, zeta=0.4, shrinkage_cov=shrink)
    assert got.item() == pytest.approx(expected.item(), rel=1e-9)


def test_istar_penalty_single_layer_and_padding_option(released_isoscore_star):
    states, mask = _hidden()
    last = states[-1][mask.bool()]
    assert istar_penalty(states, mask, 1.0, 0.0, layer=-1).item() == pytest.approx(
        (1 - released_isoscore_star(last, None, 0.0)).item(), rel=1e-9
    )
    assert istar_penalty(states, mask, 1.0, 0.0, layer=3).item() == pytest.approx(
        istar_penalty(states, mask, 1.0, 0.0, layer=-1).item()
    )
    with_padding = torch.cat([h.reshape(-1, 8) for h in states[1:]])
    assert istar_penalty(states, mask, 1.0, 0.0, include_padding=True).item() == pytest.approx(
        (1 - released_isoscore_star(with_padding, None, 0.0)).item(), rel=1e-9
    )
    with pytest.raises(ConfigError, match="layer must be in 1..3"):
        layer_points(states, mask, layer=4)


def test_cosreg_matches_pairwise_definition():
    states, mask = _hidden()
    tokens = states[-1][mask.bool()].float()
    unit = tokens / tokens.norm(dim=1, keepdim=True)
    sims = unit @ unit.T
    m = tokens.shape[0]
    expected = (sims.sum() - sims.diagonal().sum()) / m**2
    assert cosreg_penalty(states[-1], mask).item() == pytest.approx(expected.item(), rel=1e-5)
    assert cosreg_penalty(states[-1], mask, lam=2.0).item() == pytest.approx(2 * expected.item(), rel=1e-5)


@pytest.mark.parametrize("method", ["base", "cosreg", "istar"])
def test_lambda_zero_leaves_the_task_loss_exactly(method):
    states, mask = _hidden()
    assert penalty(method, states, mask, lam=0.0, zeta=0.2) is None
    assert penalty("base", states, mask, lam=5.0) is None


def test_penalty_dispatch_and_unknown_method():
    states, mask = _hidden()
    assert penalty("cosreg", states, mask, lam=1.0).item() == pytest.approx(cosreg_penalty(states[-1], mask).item())
    assert penalty("istar", states, mask, lam=-1.0, zeta=0.2).item() == pytest.approx(
        istar_penalty(states, mask, -1.0, 0.2).item()
    )
    with pytest.raises(ConfigError, match="unknown method 'isotropy'"):
        penalty("isotropy", states, mask, lam=1.0)


def test_penalty_gradient_reaches_a_real_encoder():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32))
    ids = torch.randint(0, 50, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[0, 4:] = 0
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    loss = penalty("istar", out.hidden_states, mask, lam=5.0, zeta=0.2)
    loss.backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
