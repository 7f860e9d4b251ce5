"""The HFTA-style side of ``bench_fused`` computes what the members compute: with dropout off, its task losses and
hidden states are those of the vmap bundle and of each member's own model, and a step's gradients reach each member's
own parameters (its optimizer updates them), so the benchmark compares two ways of computing one thing."""

from __future__ import annotations

import pytest
import torch

from benchmarks.hfta_bert import HftaBert
from istar_tune.models import load_model
from istar_tune.tasks import get_task
from istar_tune.training.fused import FusedModel, MemberLoss, fused_forward_backward, fused_losses


def _members(k: int) -> list[torch.nn.Module]:
    models = []
    for seed in range(k):  # members of different weights: a mix-up of rows would show
        torch.manual_seed(seed)
        models.append(load_model("tiny-bert", get_task("sst2"), "eager"))
    return models


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[2:, 9:] = 0
    return {"input_ids": torch.randint(1000, 30000, (4, 12), generator=generator), "attention_mask": mask,
            "labels": torch.tensor([0, 1, 1, 0])}


@pytest.mark.parametrize("k", [1, 3])
def test_hand_fused_operators_give_each_members_own_losses_and_hidden_states(k):
    models, batch = _members(k), _batch()
    alone = []
    with torch.no_grad():
        for model in models:
            model.eval()
            out = model(**batch, output_hidden_states=True)
            alone.append((out.loss, out.hidden_states))
    hfta = HftaBert(FusedModel(models, [torch.Generator() for _ in range(k)]))
    hfta.training = False
    with torch.no_grad():
        losses, states = hfta(batch)
    assert len(states) == len(alone[0][1])
    for member, (loss, hidden) in enumerate(alone):
        assert losses[member].item() == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
        for got, want in zip(states, hidden):
            torch.testing.assert_close(got[member], want, rtol=1e-4, atol=1e-5)


def test_a_step_through_hand_fused_operators_reaches_each_members_parameters():
    models, batch = _members(2), _batch()
    hfta = HftaBert(FusedModel(models, [torch.Generator() for _ in range(2)]))
    hfta.training = False
    loss = [MemberLoss("istar", -1.0, 0.2, shrinkage_cov=torch.eye(models[0].config.hidden_size))] * 2
    values = fused_forward_backward(hfta, loss, batch)
    assert torch.isfinite(values).all()
    grads = [models[m].classifier.weight.grad for m in range(2)]
    assert all(g is not None and g.abs().sum() > 0 for g in grads) and not torch.equal(grads[0], grads[1])
    _, again = fused_losses(hfta, loss, batch)
    torch.testing.assert_close(again, values)  # the same weights (no update yet): the same values
