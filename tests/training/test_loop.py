from __future__ import annotations

import math

import pytest

from istar_tune.tasks import TASKS, get_task
from istar_tune.training.loop import train


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_trains_one_epoch_and_reports_its_metric(make_hparams, make_settings, name):
    task = get_task(name)
    result = train(make_hparams(task=name), make_settings())
    record = result.final
    for metric in task.metrics:
        assert math.isfinite(record[metric])
    lower = -1.0 if task.metric in ("mcc", "pearson") else 0.0
    upper = 100.0 if task.metric == "f1" else 1.0
    assert lower <= record[task.metric] <= upper
    assert 0.0 <= record["eval_isoscore_star"] <= 1.0 and 0.0 <= record["eval_isoscore"] <= 1.0
    assert record["penalty"] < 0  # λ = −1: the penalty −(1 − IsoScore*) is negative
    assert record["train_loss"] == pytest.approx(record["task_loss"] + record["penalty"], rel=1e-4)


def test_same_seed_gives_the_same_metrics_and_lambda_zero_equals_base(make_hparams, make_settings):
    first = train(make_hparams(epochs=2), make_settings()).epochs
    second = train(make_hparams(epochs=2), make_settings()).epochs
    drop = ("shrinkage_time_s", "train_time_s", "eval_time_s", "epoch_time_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in first] == \
        [{k: v for k, v in r.items() if k not in drop} for r in second]
    base = train(make_hparams(method="base", lam=None), make_settings()).final
    zero = train(make_hparams(lam=0.0), make_settings()).final
    assert zero["train_loss"] == base["train_loss"] and zero["accuracy"] == base["accuracy"]
    assert zero["penalty"] == 0.0




def test_each_epochs_eval_isoscore_uses_sigma_s_of_the_model_after_that_epoch(make_hparams, make_settings, monkeypatch):
    import istar_tune.training.loop as train_module

    events = []
    estimate, epoch_fn, evaluate = (train_module.estimate_shrinkage, train_module.train_epoch,
                                    train_module.evaluate)

    def spy_estimate(run, draw=0):
        cov = estimate(run, draw)
        events.append(("sigma", draw, cov))
        return cov

    def spy_epoch(run, loss_fn, params, optimizer, scheduler, scaler, epoch, desc):
        events.append(("train", epoch, None))
        return epoch_fn(run, loss_fn, params, optimizer, scheduler, scaler, epoch, desc)

    def spy_evaluate(run, cov):
        events.append(("eval", None, cov))
        return evaluate(run, cov)

    monkeypatch.setattr(train_module, "estimate_shrinkage", spy_estimate)
    monkeypatch.setattr(train_module, "train_epoch", spy_epoch)
    monkeypatch.setattr(train_module, "evaluate", spy_evaluate)
    train(make_hparams(task="rte", epochs=2), make_settings(max_train_samples=32, max_eval_samples=16))
    assert [(kind, step) for kind, step, _ in events] == [("sigma", 0), ("train", 1), ("sigma", 1), ("eval", None),
                                                          ("train", 2), ("sigma", 2), ("eval", None)]
    import torch

    for at in (3, 6):  # each eval gets the Σ_S estimated right after its epoch's updates
        assert torch.equal(events[at][2].cpu(), events[at - 1][2].cpu())
    assert not torch.equal(events[0][2].cpu(), events[2][2].cpu())
