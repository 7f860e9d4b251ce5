from __future__ import annotations

import json
import math

import pytest

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.tasks import TASKS, get_task
from istar_tune.training.evaluate import evaluate_holdout
from istar_tune.training.loop import train
from istar_tune.training.state import BEST_CHECKPOINT, CONFIG_FILE, METRICS_FILE


def _settings(glue_tiny, **overrides) -> RunSettings:
    values = {"data_dir": str(glue_tiny), "max_length": 48, "progress": False, "shrinkage_tokens": 2000}
    values.update(overrides)
    return RunSettings(**values)


def _hparams(**overrides) -> Hyperparameters:
    values = {"model": "tiny-bert", "task": "sst2", "method": "istar", "lam": -1.0, "zeta": 0.2, "epochs": 1,
              "batch_size": 16, "learning_rate": 1e-3}
    values.update(overrides)
    return Hyperparameters(**values)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_trains_one_epoch_and_reports_its_metric(name, glue_tiny):
    task = get_task(name)
    result = train(_hparams(task=name), _settings(glue_tiny))
    record = result.final
    for metric in task.metrics:
        assert math.isfinite(record[metric])
    lower = -1.0 if task.metric in ("mcc", "pearson") else 0.0
    upper = 100.0 if task.metric == "f1" else 1.0
    assert lower <= record[task.metric] <= upper
    assert 0.0 <= record["eval_isoscore_star"] <= 1.0 and 0.0 <= record["eval_isoscore"] <= 1.0
    assert record["penalty"] < 0  # λ = −1: the penalty −(1 − IsoScore*) is negative
    assert record["train_loss"] == pytest.approx(record["task_loss"] + record["penalty"], rel=1e-4)


def test_same_seed_gives_the_same_metrics_and_lambda_zero_equals_base(glue_tiny):
    first = train(_hparams(epochs=2), _settings(glue_tiny)).epochs
    second = train(_hparams(epochs=2), _settings(glue_tiny)).epochs
    drop = ("shrinkage_time_s", "train_time_s", "eval_time_s", "epoch_time_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in first] == \
        [{k: v for k, v in r.items() if k not in drop} for r in second]
    base = train(_hparams(method="base", lam=None), _settings(glue_tiny)).final
    zero = train(_hparams(lam=0.0), _settings(glue_tiny)).final
    assert zero["train_loss"] == base["train_loss"] and zero["accuracy"] == base["accuracy"]
    assert zero["penalty"] == 0.0


def test_outputs_written_and_best_checkpoint_loads(glue_tiny, tmp_path):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "run"
    result = train(_hparams(epochs=2, method="cosreg", lam=None), _settings(glue_tiny, output_dir=str(out)))
    metrics = json.loads((out / METRICS_FILE).read_text())
    assert metrics["status"] == "finished" and metrics["metric"] == "accuracy"
    assert [r["epoch"] for r in metrics["epochs"]] == [1, 2]
    assert metrics["best"]["accuracy"] == max(r["accuracy"] for r in metrics["epochs"])
    assert metrics["best_epoch"] == result.best_epoch
    assert "hyperparameters" in (out / CONFIG_FILE).read_text()
    model = AutoModelForSequenceClassification.from_pretrained(out / BEST_CHECKPOINT)
    assert model.config.hidden_size == 32


class _Recorder:
    wants_checkpoint = True

    def __init__(self, stop_after: int | None = None, keep_dir=None):
        self.records, self.stop_after, self.keep_dir = [], stop_after, keep_dir

    def __call__(self, record, checkpoint_dir):
        import shutil

        self.records.append(record)
        assert (checkpoint_dir / "trainer_state.pt").is_file()
        if self.keep_dir is not None:
            shutil.rmtree(self.keep_dir, ignore_errors=True)
            shutil.copytree(checkpoint_dir, self.keep_dir)
        if self.stop_after is not None and record["epoch"] == self.stop_after:
            raise KeyboardInterrupt  # the trial dies after reporting this epoch


def test_resumed_run_continues_from_its_last_epoch_and_matches_an_uninterrupted_run(glue_tiny, tmp_path):
    drop = ("shrinkage_time_s", "train_time_s", "eval_time_s", "epoch_time_s")
    uninterrupted = train(_hparams(epochs=3), _settings(glue_tiny), _Recorder()).epochs
    state = tmp_path / "state"
    with pytest.raises(KeyboardInterrupt):
        train(_hparams(epochs=3), _settings(glue_tiny), _Recorder(stop_after=1, keep_dir=state))
    resumed = _Recorder()
    result = train(_hparams(epochs=3), _settings(glue_tiny), resumed, resume_from=state)
    assert [r["epoch"] for r in resumed.records] == [2, 3]  # epoch 1 is not trained again
    assert [{k: v for k, v in r.items() if k not in drop} for r in result.epochs] == \
        [{k: v for k, v in r.items() if k not in drop} for r in uninterrupted]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_mixed_precision_path_runs_with_the_penalty_in_float32(precision, glue_tiny, monkeypatch, tmp_path):
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
    result = train(_hparams(task="rte"), _settings(glue_tiny, precision=precision, max_train_samples=64,
                                                  max_eval_samples=32, output_dir=str(tmp_path)))
    import yaml

    assert yaml.safe_load((tmp_path / CONFIG_FILE).read_text())["resolved"]["precision"] == \
        {"bf16": "bfloat16", "fp16": "float16"}[precision]
    assert math.isfinite(result.final["train_loss"]) and math.isfinite(result.final["accuracy"])
    assert seen and set(seen) == {torch.float32}
    assert scaled and all(scaled) == (precision == "fp16")  # the scaler is on for fp16 only


def test_sigma_s_draws_a_fresh_seeded_random_sample_of_the_whole_training_set_each_time():
    from istar_tune.training.sigma import shrinkage_order

    first, second = shrinkage_order(1000, seed=42, draw=0), shrinkage_order(1000, seed=42, draw=1)
    assert sorted(first) == list(range(1000)) and first != second
    assert shrinkage_order(1000, seed=42, draw=1) == second  # the same seed draws the same sample
    assert max(first[:100]) > 500 and min(first[:100]) < 500  # a budget's worth spans the whole file


def test_each_epochs_eval_isoscore_uses_sigma_s_of_the_model_after_that_epoch(glue_tiny, monkeypatch):
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
    train(_hparams(task="rte", epochs=2), _settings(glue_tiny, max_train_samples=32, max_eval_samples=16))
    assert [(kind, step) for kind, step, _ in events] == [("sigma", 0), ("train", 1), ("sigma", 1), ("eval", None),
                                                          ("train", 2), ("sigma", 2), ("eval", None)]
    import torch

    for at in (3, 6):  # each eval gets the Σ_S estimated right after its epoch's updates
        assert torch.equal(events[at][2].cpu(), events[at - 1][2].cpu())
    assert not torch.equal(events[0][2].cpu(), events[2][2].cpu())


def test_with_layer_set_sigma_s_is_the_covariance_of_that_layers_tokens(glue_tiny):
    import torch

    from istar_tune.training.forward import model_inputs
    from istar_tune.training.setup import prepare
    from istar_tune.training.sigma import estimate_shrinkage

    run = prepare(_hparams(task="rte", layer=2), _settings(glue_tiny, max_train_samples=8, shrinkage_tokens=10**6))
    sigma = estimate_shrinkage(run).double()
    run.model.eval()
    points = []
    with torch.no_grad():
        for batch in run.loader(run.data.train, 4):
            hidden = run.model(**model_inputs(batch), output_hidden_states=True).hidden_states[2]  # (B, T, d)
            points.append(hidden[batch["attention_mask"].bool()].double())
    expected = torch.cov(torch.cat(points).T)
    assert torch.allclose(sigma, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("recipe", ["paper", "modern"])
def test_the_paper_recipe_is_adamw_without_decay_a_constant_rate_and_no_clipping(glue_tiny, monkeypatch, recipe):
    import torch

    from istar_tune.training import loop as train_module
    from istar_tune.training.setup import make_optimizer, prepare

    run = prepare(_hparams(weight_decay=0.01, warmup_ratio=0.1),
                  _settings(glue_tiny, max_train_samples=64, recipe=recipe))
    optimizer, scheduler, _ = make_optimizer(run, list(run.model.named_parameters()), 1e-3, 20, 0.1)
    assert isinstance(optimizer, torch.optim.AdamW)
    decays = {group["weight_decay"] for group in optimizer.param_groups}
    rates = []
    for _ in range(6):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    clipped = []
    monkeypatch.setattr(train_module.torch.nn.utils, "clip_grad_norm_", lambda *a, **k: clipped.append(1))
    train_module.train(_hparams(), _settings(glue_tiny, max_train_samples=32, max_eval_samples=16, recipe=recipe))
    if recipe == "paper":
        assert decays == {0.0} and rates == [1e-3] * 6 and not clipped
    else:
        assert decays == {0.01, 0.0} and rates[0] == 0.0 and rates[1] > 0.0 and clipped  # warm-up, then clipping


def test_the_paper_recipe_uses_fp16_with_a_scaler_on_cuda():
    import torch

    from istar_tune.training.setup import resolve_precision

    assert resolve_precision("auto", torch.device("cuda"), "paper") == torch.float16
    assert resolve_precision("auto", torch.device("cpu"), "paper") is None  # float32 on CPU, as every recipe


class _Scripted:
    """``evaluate_holdout`` with its value replaced by a script, one value per call (the real pass still runs)."""

    def __init__(self, values):
        self.real, self.values, self.calls = evaluate_holdout, list(values), 0

    def __call__(self, run):
        measured = self.real(run)
        assert set(measured) == {"holdout_accuracy"}
        self.calls += 1
        return {"holdout_accuracy": self.values[self.calls - 1]}


def _weights(path):
    import torch

    return torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)


def test_with_holdout_the_epoch_chosen_on_held_out_data_is_scored_kept_and_ends_the_stage(glue_tiny, tmp_path,
                                                                                        monkeypatch):
    import shutil

    import torch

    from istar_tune.training import loop as train_module

    monkeypatch.setattr(train_module, "evaluate_holdout", _Scripted([0.5, 0.7, 0.6, 0.65, 0.9]))
    out, states = tmp_path / "run", tmp_path / "states"

    class Keeper(_Recorder):
        def __call__(self, record, checkpoint_dir):
            super().__call__(record, checkpoint_dir)
            shutil.copytree(checkpoint_dir, states / str(record["epoch"]))

    settings = _settings(glue_tiny, holdout=0.3, patience=2, output_dir=str(out), checkpoint="weights")
    result = train(_hparams(epochs=5, method="base", lam=None), settings, Keeper())
    # Epoch 2 is best on the held-out data; two epochs without a better one end the run after epoch 4.
    assert [r["epoch"] for r in result.epochs] == [1, 2, 3, 4]
    assert result.best_epoch == 2 and all(r["scored_epoch"] == (1 if r["epoch"] == 1 else 2) for r in result.epochs)
    assert result.final["scored_accuracy"] == result.epochs[1]["accuracy"]
    assert result.final["scored_eval_isoscore_star"] == result.epochs[1]["eval_isoscore_star"]
    # The held-out examples are not trained on: 30 % of the training file (a seeded split).
    run = train_module.prepare(_hparams(method="base", lam=None), _settings(glue_tiny, holdout=0.3))
    everything = train_module.prepare(_hparams(method="base", lam=None), _settings(glue_tiny))
    assert len(run.data.holdout) == math.ceil(0.3 * len(everything.data.train))
    assert len(run.data.train) + len(run.data.holdout) == len(everything.data.train)
    # The kept model is epoch 2's: in the final checkpoint, in the best checkpoint, and carried by epoch 3's state.
    final, third = _weights(states / "4"), _weights(states / "3")
    assert final["finished"] and final["stopped"] and "optimizer" not in final
    from transformers import AutoModelForSequenceClassification

    best = AutoModelForSequenceClassification.from_pretrained(out / BEST_CHECKPOINT).state_dict()
    for name, value in final["model"].items():
        assert torch.equal(value, third["best_model"][name])
        if name in best:
            assert torch.equal(value, best[name])
    assert any(not torch.equal(final["model"][n], third["model"][n]) for n in final["model"])


@pytest.mark.parametrize("stop_after", [2, 3])  # at the best epoch, and one after it
def test_a_run_with_holdout_resumed_mid_stage_ends_as_an_uninterrupted_one(glue_tiny, tmp_path, monkeypatch,
                                                                          stop_after):
    import torch

    from istar_tune.training import loop as train_module

    drop = ("shrinkage_time_s", "train_time_s", "eval_time_s", "epoch_time_s")
    script = [0.5, 0.7, 0.6, 0.65]
    settings = _settings(glue_tiny, holdout=0.3, patience=2)
    hp = _hparams(epochs=5, method="base", lam=None)
    monkeypatch.setattr(train_module, "evaluate_holdout", _Scripted(script))
    whole = _Recorder(keep_dir=tmp_path / "whole")
    uninterrupted = train(hp, settings, whole).epochs
    monkeypatch.setattr(train_module, "evaluate_holdout", _Scripted(script))
    with pytest.raises(KeyboardInterrupt):
        train(hp, settings, _Recorder(stop_after=stop_after, keep_dir=tmp_path / "state"))
    monkeypatch.setattr(train_module, "evaluate_holdout", _Scripted(script[stop_after:]))
    resumed = _Recorder(keep_dir=tmp_path / "resumed")
    result = train(hp, settings, resumed, resume_from=tmp_path / "state")
    assert [r["epoch"] for r in resumed.records] == list(range(stop_after + 1, 5))
    assert [{k: v for k, v in r.items() if k not in drop} for r in result.epochs] == \
        [{k: v for k, v in r.items() if k not in drop} for r in uninterrupted]
    kept, ended = _weights(tmp_path / "resumed"), _weights(tmp_path / "whole")
    assert all(torch.equal(kept["model"][n], ended["model"][n]) for n in ended["model"])
    # A stopped run resumed again trains nothing more.
    again = _Recorder()
    assert train(hp, settings, again, resume_from=tmp_path / "resumed").best_epoch == 2 and not again.records


def test_holdout_settings_are_checked(glue_tiny):
    from istar_tune.config import from_dict
    from istar_tune.errors import ConfigError

    with pytest.raises(ConfigError, match="patience 2 needs a holdout"):
        from_dict(RunSettings, {"patience": 2})
    with pytest.raises(ConfigError, match="holdout must lie strictly between 0 and 1"):
        from_dict(RunSettings, {"holdout": 1.0})
    with pytest.raises(ConfigError, match="sentence-level tasks"):
        train(_hparams(task="squad"), _settings(glue_tiny, holdout=0.3))
