from __future__ import annotations

import math

import pytest

from istar_tune.training.loop import train
from istar_tune.training.state import CONFIG_FILE


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_mixed_precision_path_runs_with_the_penalty_in_float32(make_hparams, make_settings, precision, monkeypatch,
                                                                   tmp_path):
    """autocast (bf16, or fp16 with the gradient scaler) runs on CPU as on a GPU; I-STAR's score gets float32."""
    import torch

    import istar_tune.losses as losses

    seen = []
    original = losses.isoscore_star

    def spy(points, *args, **kwargs):
        score = original(points, *args, **kwargs)
        seen.append(score.dtype)
        return score

    monkeypatch.setattr(losses, "isoscore_star", spy)
    scaled = []
    original_scale = torch.amp.GradScaler.scale
    monkeypatch.setattr(torch.amp.GradScaler, "scale",
                        lambda self, value: scaled.append(self.is_enabled()) or original_scale(self, value))
    result = train(make_hparams(task="rte"), make_settings(precision=precision, max_train_samples=64,
                                                  max_eval_samples=32, output_dir=str(tmp_path)))
    import yaml

    assert (yaml.safe_load((tmp_path / CONFIG_FILE).read_text())["resolved"]["precision"]
            == {"bf16": "bfloat16", "fp16": "float16"}[precision])
    assert math.isfinite(result.final["train_loss"]) and math.isfinite(result.final["accuracy"])
    assert seen and set(seen) == {torch.float32}
    assert scaled and all(scaled) == (precision == "fp16")  # the scaler is on for fp16 only


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")
def test_weights_that_become_non_finite_fail_the_epoch(make_hparams, make_settings):
    """An update can overflow while the loss that led to it was finite: the epoch checks the weights."""
    import torch

    from istar_tune.errors import TrainingError
    from istar_tune.training.epoch import method_loss, train_epoch
    from istar_tune.training.run import prepare

    run = prepare(make_hparams(method="base", batch_size=8), make_settings(max_train_samples=8, max_eval_samples=8))
    params = [p for p in run.model.parameters() if p.requires_grad]

    class Overflowing:
        def zero_grad(self, set_to_none=True):
            pass

        def step(self):
            with torch.no_grad():
                params[0].fill_(float("nan"))

    scheduler = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([torch.zeros(1, requires_grad=True)]), lambda s: 1)
    with pytest.raises(TrainingError, match="the weights became non-finite in epoch 1"):
        train_epoch(run, method_loss(run, None), params, Overflowing(), scheduler,
                    torch.amp.GradScaler("cpu", enabled=False), 1, "epoch 1/1")


def test_a_non_finite_loss_is_found_at_the_hosts_next_read_naming_its_step(make_hparams, make_settings, monkeypatch):
    """On an accelerator the host reads the losses every few steps (no sync per step); the error still names the
    first bad step and its loss, and the epoch's means are those of every step."""
    import torch

    from istar_tune.errors import TrainingError
    from istar_tune.training import epoch as module
    from istar_tune.training.epoch import method_loss, train_epoch
    from istar_tune.training.run import prepare

    run = prepare(make_hparams(method="base", batch_size=4), make_settings(max_train_samples=24, max_eval_samples=8))
    params = [p for p in run.model.parameters() if p.requires_grad]
    reads = []
    original = module._raise_if_bad
    monkeypatch.setattr(module, "host_sync_steps", lambda device: 4)
    monkeypatch.setattr(module, "_raise_if_bad", lambda *a: reads.append(1) or original(*a))

    def fresh():
        optimizer = torch.optim.SGD(params, lr=0.0)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1)

    losses = method_loss(run, None)
    seen = []

    def counted(batch):
        found = losses(batch)
        seen.append(found[0].item())
        return found

    totals = train_epoch(run, counted, params, *fresh(), torch.amp.GradScaler("cpu", enabled=False), 1, "epoch 1/1")
    assert len(reads) == 2 and math.isclose(totals["train_loss"], sum(seen) / 6, rel_tol=1e-6)  # steps 4 and 6

    def poisoned(batch, calls=[0]):  # noqa: B006 - the call count
        calls[0] += 1
        loss, task, pen = losses(batch)
        return (loss * float("nan"), task, pen) if calls[0] == 2 else (loss, task, pen)

    with pytest.raises(TrainingError, match=r"the loss became nan at epoch 1, step 2: lower the learning rate"):
        train_epoch(run, poisoned, params, *fresh(), torch.amp.GradScaler("cpu", enabled=False), 1, "epoch 1/1")
