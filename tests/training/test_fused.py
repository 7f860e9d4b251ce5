"""Fused members against their configurations trained alone through the plain path (``method_loss`` and
``forward_backward``, one run at a time): bit for bit for a bundle of one, to float32 rounding for more, dropout on."""

from __future__ import annotations

import pytest
import torch

from istar_tune.errors import ConfigError
from istar_tune.training.epoch import forward_backward, method_loss
from istar_tune.training.fused import (
    FusedModel,
    MemberLoss,
    fuse_problems,
    fused_forward_backward,
    member_dropout,
    own_generator,
)
from istar_tune.training.run import make_optimizer, prepare
from istar_tune.training.sigma import estimate_shrinkage
from istar_tune.training.state import compact

TRAIN = 64
"""Training examples: four steps of 16."""


def _member(make_hparams, make_settings, **hparams):
    """A prepared run (eager attention, dropout on), its Σ_S, its optimizer, and a generator where its own training
    would start drawing (taken before anything else draws from the global generator)."""
    run = prepare(make_hparams(**hparams), make_settings(attn_implementation="eager", max_train_samples=TRAIN,
                                                         max_eval_samples=8))
    generator = own_generator(run.device)
    sigma = estimate_shrinkage(run) if run.hparams.method == "istar" else None
    optimizer, scheduler, scaler = make_optimizer(run, list(run.model.named_parameters()), run.hparams.learning_rate,
                                                  1, run.hparams.warmup_ratio)
    return run, generator, sigma, (optimizer, scheduler, scaler)


def _update(run, optimizer, scheduler) -> None:
    """The plain path's update after a step's gradients: clip to the run's norm, step, schedule, zero."""
    torch.nn.utils.clip_grad_norm_([p for p in run.model.parameters() if p.requires_grad], run.settings.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def _batches(run):
    return [run.to_device(b) for b in run.loader(run.data.train, run.hparams.batch_size, shuffle_seed=7)]


def _alone(make_hparams, make_settings, **hparams):
    """The configuration trained alone: each step's logged values (3,) and its weights after the steps."""
    run, _, sigma, (optimizer, scheduler, scaler) = _member(make_hparams, make_settings, **hparams)
    run.model.train()
    loss_fn = method_loss(run, sigma)
    values = []
    for batch in _batches(run):
        values.append(forward_backward(loss_fn, batch, 1, scaler))
        _update(run, optimizer, scheduler)
    return torch.stack(values), {n: p.detach().clone() for n, p in run.model.named_parameters()}


def _fused(make_hparams, make_settings, configurations, poison: int | None = None):
    """The configurations trained as one bundle: each step's values (K, 3), each member's weights after them."""
    members = [_member(make_hparams, make_settings, **c) for c in configurations]
    runs = [m[0] for m in members]
    model = FusedModel([r.model for r in runs], [m[1] for m in members])
    losses = [MemberLoss.of(r.hparams, m[2]) for r, m in zip(runs, members)]
    if poison is not None:  # a member whose penalty weight is NaN: its loss is non-finite from the first step
        losses[poison] = MemberLoss("istar", float("nan"), 0.2, shrinkage_cov=losses[poison].shrinkage_cov)
    model.train()
    values = []
    for batch in _batches(runs[0]):
        values.append(fused_forward_backward(model, losses, batch))
        for run, (_, _, _, (optimizer, scheduler, _)) in zip(runs, members):
            _update(run, optimizer, scheduler)
    return torch.stack(values, dim=1), [{n: p.detach().clone() for n, p in r.model.named_parameters()} for r in runs]


def test_a_bundle_of_one_trains_bit_for_bit_as_its_configuration_alone(make_hparams, make_settings):
    config = {"method": "istar", "lam": -1.0, "zeta": 0.2, "learning_rate": 2e-3}
    alone_values, alone_weights = _alone(make_hparams, make_settings, **config)
    fused_values, (fused_weights,) = _fused(make_hparams, make_settings, [config])
    assert torch.equal(fused_values[0], alone_values)
    assert all(torch.equal(fused_weights[n], alone_weights[n]) for n in alone_weights)


CONFIGURATIONS = [{"method": "base", "learning_rate": 1e-3}, {"method": "istar", "lam": -1.0, "zeta": 0.2,
                  "learning_rate": 3e-3}, {"method": "cosreg", "lam": 0.5, "learning_rate": 2e-3},
                  {"method": "istar", "lam": 0.0, "zeta": 0.2, "learning_rate": 1e-3, "weight_decay": 0.1}]


def test_fused_members_agree_with_their_configurations_alone_to_float32_rounding(make_hparams, make_settings):
    fused_values, fused_weights = _fused(make_hparams, make_settings, CONFIGURATIONS)
    for k, config in enumerate(CONFIGURATIONS):
        alone_values, alone_weights = _alone(make_hparams, make_settings, **config)
        # The same dropout masks and penalty: every step's losses to float32 rounding (not to a seed's noise).
        torch.testing.assert_close(fused_values[k], alone_values, rtol=1e-5, atol=1e-6)
        for name, weight in alone_weights.items():
            torch.testing.assert_close(fused_weights[k][name], weight, rtol=1e-4, atol=1e-5)
    # An I-STAR member with λ = 0 is Base: no penalty, its losses Base's own at the same learning rate.
    assert torch.equal(fused_values[3][:, 2], torch.zeros(fused_values.shape[1], dtype=torch.float64))
    assert not torch.equal(fused_values[1][:, 2], torch.zeros_like(fused_values[1][:, 2]))


def test_a_member_with_a_non_finite_loss_spoils_only_its_own_weights(make_hparams, make_settings):
    healthy_values, healthy_weights = _fused(make_hparams, make_settings, CONFIGURATIONS[:2])
    values, weights = _fused(make_hparams, make_settings, CONFIGURATIONS[:2], poison=1)
    assert not torch.isfinite(values[1, :, 0]).any()
    assert not all(torch.isfinite(w).all() for w in weights[1].values())
    assert torch.equal(values[0], healthy_values[0])
    assert all(torch.equal(weights[0][n], healthy_weights[0][n]) for n in weights[0])


def test_a_members_dropout_is_the_mask_dropout_draws_alone_under_vmap_too():
    x = torch.randn(3, 5, 7)
    expected = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        expected.append(torch.nn.functional.dropout(x, 0.3, training=True))
    generators = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        generators.append(own_generator())
    alone = member_dropout(x, 0.3, [generators[0]], torch.tensor(0))
    assert torch.equal(alone, expected[0])
    for seed, generator in zip((1, 2), generators):  # the same generators again, from their start
        torch.manual_seed(seed)
        generator.set_state(torch.get_rng_state())
    both = torch.func.vmap(lambda xs, k: member_dropout(xs, 0.3, generators, k), randomness="same")(
        torch.stack([x, x]), torch.arange(2))
    assert torch.equal(both[0], expected[0]) and torch.equal(both[1], expected[1])


def test_what_cannot_be_fused_is_refused_with_the_reason(make_hparams, make_settings):
    sdpa = prepare(make_hparams(), make_settings(max_train_samples=16, max_eval_samples=8)).model
    assert sdpa.config.attention_probs_dropout_prob > 0
    assert fuse_problems([sdpa]) == ["attention sdpa draws its dropout inside its kernel, where no member's own "
                                     "generator reaches: use attn_implementation eager to fuse"]
    eager = prepare(make_hparams(), make_settings(max_train_samples=16, max_eval_samples=8,
                                                  attn_implementation="eager")).model
    smaller = prepare(make_hparams(task="stsb"), make_settings(max_train_samples=16, max_eval_samples=8,
                                                               attn_implementation="eager")).model
    assert fuse_problems([eager, eager]) == []
    (problem,) = fuse_problems([eager, smaller])
    assert problem.startswith("member 1's parameters differ from member 0's (first at classifier.weight)")
    with pytest.raises(ConfigError, match="a bundle of 2 members needs as many generators, got 1"):
        FusedModel([eager, eager], [own_generator()])


def test_members_weights_live_in_the_stack_and_a_saved_member_holds_its_own_alone(make_hparams, make_settings):
    settings = make_settings(max_train_samples=16, max_eval_samples=8, attn_implementation="eager")
    runs = [prepare(make_hparams(), settings) for _ in range(2)]
    before = [{n: p.detach().clone() for n, p in r.model.named_parameters()} for r in runs]
    fused = FusedModel([r.model for r in runs], [own_generator(), own_generator()])
    name, stack = next(iter(fused.stacked.items()))
    assert stack.shape[0] == 2 and all(torch.equal(stack[k], before[k][name]) for k in range(2))
    with torch.no_grad():  # an update of member 1 (its optimizer's, in place) is its row of the stack
        dict(runs[1].model.named_parameters())[name].add_(1.0)
    assert torch.equal(stack[1], before[1][name] + 1.0) and torch.equal(stack[0], before[0][name])
    saved = compact(runs[1].model.state_dict())  # what its checkpoint saves
    assert torch.equal(saved[name], before[1][name] + 1.0)
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in saved.values())


def test_a_random_layer_other_than_dropout_is_refused_in_a_fused_forward():
    from istar_tune.training.fused import MemberDropouts

    with MemberDropouts([own_generator()], torch.tensor(0)):
        with pytest.raises(ConfigError, match="calls alpha_dropout in training"):
            torch.nn.functional.alpha_dropout(torch.ones(4), 0.5, training=True)
        assert torch.equal(torch.nn.functional.alpha_dropout(torch.ones(4), 0.5), torch.ones(4))  # eval: no draw


def test_members_own_batches_stack_padded_to_the_longest_with_what_the_collator_pads():
    from istar_tune.training.fused import stack_batches

    short = {"input_ids": torch.tensor([[101, 7, 102]]), "attention_mask": torch.ones(1, 3, dtype=torch.long),
             "token_type_ids": torch.zeros(1, 3, dtype=torch.long), "labels": torch.tensor([1])}
    long = {"input_ids": torch.tensor([[101, 7, 8, 9, 102]]), "attention_mask": torch.ones(1, 5, dtype=torch.long),
            "token_type_ids": torch.zeros(1, 5, dtype=torch.long), "labels": torch.tensor([0])}
    stacked, lengths = stack_batches([short, long], pad_id=0)
    assert lengths == [3, 5] and stacked["input_ids"].tolist() == [[[101, 7, 102, 0, 0]], [[101, 7, 8, 9, 102]]]
    assert stacked["attention_mask"].tolist() == [[[1, 1, 1, 0, 0]], [[1, 1, 1, 1, 1]]]
    assert stacked["labels"].tolist() == [[1], [0]] and stacked["token_type_ids"].shape == (2, 1, 5)
    wider, _ = stack_batches([short, long], pad_id=0, avoid=(5, 6))  # a length no other axis of the model has
    assert wider["input_ids"].shape == (2, 1, 7) and wider["attention_mask"][1, 0].tolist() == [1] * 5 + [0] * 2


def test_a_members_dropout_mask_in_a_padded_batch_is_the_one_its_own_shape_draws():
    from istar_tune.training.fused import member_dropout

    generators = [torch.Generator().manual_seed(seed) for seed in (1, 2)]
    padded = member_dropout(torch.ones(2, 7, 4), 0.5, generators, torch.tensor(1), lengths=[5, 3], padded=7)
    own = torch.empty(2, 3, 4).bernoulli_(0.5, generator=torch.Generator().manual_seed(2)) / 0.5
    assert torch.equal(padded[:, :3], own) and torch.equal(padded[:, 3:], torch.zeros(2, 4, 4))
