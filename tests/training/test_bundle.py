"""A bundle's epoch against each member's configuration trained alone by the plain path's epoch (``train_epoch``):
the same mean losses and weights to float32 rounding; a member that fails leaves alone, the others go on."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from istar_tune.errors import ConfigError
from istar_tune.training.bundle import Member, bundle_epoch, bundle_problems, train_bundle
from istar_tune.training.epoch import TRAIN_TOKENS, method_loss, train_epoch
from istar_tune.training.fused import MemberLoss, own_generator
from istar_tune.training.loop import MEASURED_KEYS, train
from istar_tune.training.run import make_optimizer, prepare
from istar_tune.training.sigma import estimate_shrinkage

CONFIGURATIONS = [{"method": "base", "learning_rate": 1e-3}, {"method": "istar", "lam": -1.0, "zeta": 0.2,
                  "learning_rate": 3e-3}, {"method": "cosreg", "lam": 0.5, "learning_rate": 2e-3, "grad_accum": 2}]
"""Three configurations of one batch stream (grad_accum differs in the last: it is set to 2 for all below)."""


def _member(make_hparams, make_settings, **hparams) -> tuple[Member, torch.Tensor | None]:
    run = prepare(make_hparams(grad_accum=2, batch_size=8, **{k: v for k, v in hparams.items() if k != "grad_accum"}),
                  make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=8))
    generator = own_generator(run.device)  # where this configuration's own training starts drawing
    sigma = estimate_shrinkage(run) if run.hparams.method == "istar" else None
    optimizer, scheduler, scaler = make_optimizer(run, list(run.model.named_parameters()), run.hparams.learning_rate,
                                                  1, run.hparams.warmup_ratio)
    return Member(run, optimizer, scheduler, scaler, MemberLoss.of(run.hparams, sigma), generator), sigma


def _weights(member: Member) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in member.run.model.named_parameters()}


def test_a_bundles_epoch_gives_each_member_what_its_configuration_alone_gives(make_hparams, make_settings):
    members = [_member(make_hparams, make_settings, **c)[0] for c in CONFIGURATIONS]
    fused = bundle_epoch(members, epoch=1)
    for k, config in enumerate(CONFIGURATIONS):
        alone, sigma = _member(make_hparams, make_settings, **config)
        run = alone.run
        expected = train_epoch(run, method_loss(run, sigma), alone.params, alone.optimizer, alone.scheduler,
                               alone.scaler, 1, "alone")
        assert fused[k][TRAIN_TOKENS] == expected[TRAIN_TOKENS]
        for key in ("train_loss", "task_loss", "penalty"):
            assert fused[k][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), (config, key)
        for name, weight in _weights(alone).items():
            torch.testing.assert_close(_weights(members[k])[name], weight, rtol=1e-4, atol=1e-5)
    assert all(m.error is None for m in members)


def test_a_member_whose_loss_turns_non_finite_leaves_the_bundle_alone(make_hparams, make_settings):
    members = [_member(make_hparams, make_settings, **c)[0] for c in CONFIGURATIONS]
    poisoned = members[1]
    members[1] = dataclasses.replace(poisoned, loss=dataclasses.replace(poisoned.loss, lam=float("nan")))
    without = [_member(make_hparams, make_settings, **c)[0] for c in (CONFIGURATIONS[0], CONFIGURATIONS[2])]
    fused = bundle_epoch(members, epoch=1)
    expected = bundle_epoch(without, epoch=1)
    assert set(fused) == {0, 2}
    assert members[1].error == ("the loss became nan at epoch 1, step 1: lower the learning rate (0.003) or |lam| "
                                "(-1.0)")
    for k, j in ((0, 0), (2, 1)):
        assert members[k].error is None
        assert fused[k]["train_loss"] == pytest.approx(expected[j]["train_loss"], rel=1e-5)
        for name, weight in _weights(without[j]).items():
            torch.testing.assert_close(_weights(members[k])[name], weight, rtol=1e-4, atol=1e-5)
    # The epoch after: the member that left does not come back; the others train on.
    assert set(bundle_epoch(members, epoch=2)) == {0, 2}


def test_what_cannot_share_a_batch_stream_is_refused_before_a_step(make_hparams, make_settings):
    first, _ = _member(make_hparams, make_settings, method="base")
    settings = make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=8)
    other = prepare(make_hparams(batch_size=16, grad_accum=4), settings)
    second = dataclasses.replace(first, run=other)
    assert bundle_problems([first, second]) == [
        "member 1's batch_size is 16, member 0's 8: a bundle's members read one batch stream",
        "member 1's grad_accum is 4, member 0's 2: a bundle's members read one batch stream"]
    with pytest.raises(ConfigError, match="a bundle's members read one batch stream"):
        bundle_epoch([first, second], epoch=1)
    halves = dataclasses.replace(first, run=dataclasses.replace(first.run, amp_dtype=torch.float16))
    assert bundle_problems([halves]) == ["precision fp16 scales each run's loss by a factor of its own: use bf16 or "
                                         "fp32 to fuse"]


def _records(result, drop=MEASURED_KEYS) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in drop} for r in result.epochs]


def _assert_as_alone(result, alone) -> None:
    """Every record key of a fused member as its configuration alone gives it: to float32 rounding of the batched
    kernels (not a seed's noise), counts and choices exactly."""
    for mine, theirs in zip(_records(result), _records(alone), strict=True):
        assert mine.keys() == theirs.keys()
        for key, value in theirs.items():
            assert mine[key] == (pytest.approx(value, rel=1e-4, abs=1e-6) if isinstance(value, float) else value), key


def test_a_bundle_of_one_fine_tunes_bit_for_bit_as_train_alone(make_hparams, make_settings):
    hp = make_hparams(epochs=2)
    settings = make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=16)
    (bundled,) = train_bundle([hp], settings)
    alone = train(hp, settings)
    assert bundled.status == "finished" and bundled.best_epoch == alone.best_epoch
    assert _records(bundled) == _records(alone)


def test_a_bundles_members_fine_tune_as_their_configurations_alone_each_to_its_own_epochs(make_hparams,
                                                                                          make_settings):
    settings = make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=16)
    configurations = [make_hparams(method="base", lam=None, epochs=1, learning_rate=1e-3),
                      make_hparams(epochs=2, learning_rate=3e-3),
                      make_hparams(method="cosreg", lam=0.5, epochs=2, learning_rate=2e-3)]
    bundled = train_bundle(configurations, settings)
    for hp, result in zip(configurations, bundled):
        alone = train(hp, settings)
        assert [r["epoch"] for r in result.epochs] == list(range(1, hp.epochs + 1))
        assert result.best_epoch == alone.best_epoch
        _assert_as_alone(result, alone)


def test_members_of_different_seeds_each_read_their_own_data_order_as_alone(make_hparams, make_settings):
    """A fused seeds stage: each member its own seed (its own split, data order, dropout and Σ_S draws), its batches
    padded to the longest of the step's; each member's records as its configuration alone gives them."""
    settings = make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=16)
    configurations = [make_hparams(epochs=2, learning_rate=3e-3, seed=seed) for seed in (1, 2, 3)]
    bundled = train_bundle(configurations, settings)
    alone = [train(hp, settings) for hp in configurations]
    for result, twin in zip(bundled, alone):
        assert result.status == "finished" and result.best_epoch == twin.best_epoch
        _assert_as_alone(result, twin)
    assert len({r.epochs[0]["train_loss"] for r in bundled}) == 3  # three data orders, not one


def test_a_failing_member_ends_failed_with_its_error_and_the_others_finish(make_hparams, make_settings,
                                                                            monkeypatch):
    import istar_tune.training.bundle as bundle

    real = bundle.MemberLoss.of

    def poisoned(hparams, shrinkage_cov=None):  # the I-STAR member's penalty weight NaN: its loss is from step 1
        loss = real(hparams, shrinkage_cov)
        return dataclasses.replace(loss, lam=float("nan")) if hparams.method == "istar" else loss

    monkeypatch.setattr(bundle.MemberLoss, "of", poisoned)
    settings = make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=16)
    results = train_bundle([make_hparams(method="base", lam=None, epochs=2), make_hparams(epochs=2)], settings)
    assert [r.status for r in results] == ["finished", "failed"]
    assert results[1].error.startswith("TrainingError: the loss became nan at epoch 1, step 1: lower the learning")
    assert results[1].epochs == [] and [r["epoch"] for r in results[0].epochs] == [1, 2]


def test_a_bundle_stopped_mid_way_resumes_each_member_from_its_checkpoint_to_the_same_records(make_hparams,
                                                                                              make_settings,
                                                                                              make_recorder,
                                                                                              tmp_path):
    settings = make_settings(attn_implementation="eager", max_train_samples=48, max_eval_samples=16)
    configurations = [make_hparams(method="base", lam=None, epochs=3), make_hparams(epochs=3, learning_rate=3e-3)]
    whole = train_bundle(configurations, settings)
    # Killed after both members reported epoch 1 (the second's report raises, as Ctrl-C would)
    kept = [tmp_path / "first", tmp_path / "second"]
    with pytest.raises(KeyboardInterrupt):
        train_bundle(configurations, settings, [make_recorder(keep_dir=kept[0]),
                                                make_recorder(stop_after=1, keep_dir=kept[1])])
    state = torch.load(kept[1] / "trainer_state.pt", weights_only=False)  # a member's own weights, not the stacks
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in state["model"].values())
    resumed = train_bundle(configurations, settings, resume_from=kept)
    for before, after in zip(whole, resumed):
        assert _records(after) == _records(before)  # bit for bit: the same bundle, its dropout streams restored


def test_a_bundle_fine_tunes_a_task_of_ones_own_as_train_does_alone(make_hparams, make_settings, tmp_path):
    from istar_tune.tasks import task_from_mapping

    rows = [("the printer is jammed again", "hardware"), ("refund my last invoice", "billing"),
            ("the app crashes on start", "software"), ("my screen flickers", "hardware"),
            ("charged twice this month", "billing"), ("update broke the login", "software")] * 4
    for name, part in (("train.csv", rows), ("dev.csv", rows[:9])):
        (tmp_path / name).write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in part))
    task = task_from_mapping({"name": "tickets", "train": "train.csv", "validation": "dev.csv"}, tmp_path)
    settings = make_settings(attn_implementation="eager", data_dir=None)
    configurations = [make_hparams(task="tickets", method="base", lam=None, epochs=2),
                      make_hparams(task="tickets", epochs=2, learning_rate=3e-3)]
    bundled = train_bundle(configurations, settings, task=task)
    for hp, result in zip(configurations, bundled):
        alone = train(hp, settings, task=task)
        assert result.status == "finished" and result.metric == alone.metric == "accuracy"
        assert [r["epoch"] for r in result.epochs] == [1, 2] and result.best_epoch == alone.best_epoch
        _assert_as_alone(result, alone)
