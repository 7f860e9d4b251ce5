"""The one forward pass over a split that Σ_S, evaluation, IsoLayer and analyze share."""

from __future__ import annotations

import torch

from istar_tune.training.forward import forward_pass, model_inputs


class Recorder(torch.nn.Module):
    """Returns its inputs' sum as 'hidden states' and records whether it ran in training mode or with gradients."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, input_ids, attention_mask, output_hidden_states=False):  # a `labels` argument would fail here
        self.calls.append((self.training, torch.is_grad_enabled()))
        value = input_ids.float() * self.weight
        return type("Out", (), {"hidden_states": (value,) if output_hidden_states else None, "logits": value})()


def _batches(n: int):
    return [{"input_ids": torch.full((2, 3), i), "attention_mask": torch.ones(2, 3, dtype=torch.long),
             "labels": torch.zeros(2, dtype=torch.long)} for i in range(n)]


def test_forward_pass_runs_in_eval_mode_without_labels_or_gradients_and_yields_each_batch():
    model = Recorder().train()
    seen = [(batch["input_ids"][0, 0].item(), outputs.hidden_states[0][0, 0].item())
            for batch, outputs in forward_pass(model, _batches(3), "cpu")]
    assert seen == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert all(not training and not grad for training, grad in model.calls)
    assert "labels" not in model_inputs(_batches(1)[0])


def test_a_consumer_that_has_enough_stops_the_pass():
    model = Recorder()
    for count, _ in enumerate(forward_pass(model, _batches(10), "cpu", hidden_states=False), start=1):
        if count == 4:
            break
    assert len(model.calls) == 4
