from __future__ import annotations

import os

import pytest
import torch

from istar_tune.config import RunSettings
from istar_tune.training.loop import MEASURED_KEYS, train
from istar_tune.training.run import prepare


@pytest.mark.parametrize("recipe", ["paper", "modern"])
def test_the_paper_recipe_is_adamw_without_decay_a_constant_rate_and_no_clipping(make_hparams, make_settings,
                                                                                 monkeypatch, recipe):
    import torch

    from istar_tune.training import loop as train_module
    from istar_tune.training.run import make_optimizer, prepare

    run = prepare(make_hparams(weight_decay=0.01, warmup_ratio=0.1),
                  make_settings(max_train_samples=64, recipe=recipe))
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
    train_module.train(make_hparams(), make_settings(max_train_samples=32, max_eval_samples=16, recipe=recipe))
    if recipe == "paper":
        assert decays == {0.0} and rates == [1e-3] * 6 and not clipped
    else:
        assert decays == {0.01, 0.0} and rates[0] == 0.0 and rates[1] > 0.0 and clipped  # warm-up, then clipping


def test_the_paper_recipe_uses_fp16_with_a_scaler_on_cuda():
    import torch

    from istar_tune.training.run import resolve_precision

    assert resolve_precision("auto", torch.device("cuda"), "paper") == torch.float16
    assert resolve_precision("auto", torch.device("cpu"), "paper") is None  # float32 on CPU, as every recipe


def test_holdout_settings_are_checked(make_hparams, make_settings):
    from istar_tune.config import from_dict
    from istar_tune.errors import ConfigError

    with pytest.raises(ConfigError, match="patience 2 needs a holdout"):
        from_dict(RunSettings, {"patience": 2})
    with pytest.raises(ConfigError, match="holdout must lie strictly between 0 and 1"):
        from_dict(RunSettings, {"holdout": 1.0})
    with pytest.raises(ConfigError, match="sentence-level tasks"):
        train(make_hparams(task="squad"), make_settings(holdout=0.3))


@pytest.mark.parametrize(("recipe", "epsilon", "decay"), [("paper", 1e-6, 0.0), ("modern", 1e-8, 0.01)])
def test_adamw_takes_the_recipes_epsilon_and_an_inserted_layer_no_weight_decay(recipe, epsilon, decay):
    from types import SimpleNamespace

    import torch

    from istar_tune.config import Hyperparameters, RunSettings
    from istar_tune.training.run import make_optimizer

    layer = torch.nn.Linear(4, 4)
    run = SimpleNamespace(settings=RunSettings(recipe=recipe), hparams=Hyperparameters(weight_decay=0.01),
                          data=SimpleNamespace(train=list(range(8))), device=torch.device("cpu"), amp_dtype=None)
    named = list(layer.named_parameters())
    optimizer, _, _ = make_optimizer(run, named, 1e-3, 1, 0.1)
    assert {g["eps"] for g in optimizer.param_groups} == {epsilon}
    assert [g["weight_decay"] for g in optimizer.param_groups] == [decay, 0.0]  # the weight; the bias never
    layer_only, _, _ = make_optimizer(run, named, 1e-3, 1, 0.1, decay=False)  # IsoLayer's inserted layer
    assert [g["weight_decay"] for g in layer_only.param_groups] == [0.0, 0.0]


def test_deterministic_turns_torchs_deterministic_kernels_on_for_its_run_and_off_for_the_next(make_hparams,
                                                                                              make_settings,
                                                                                              monkeypatch):
    import torch

    from istar_tune.training.run import prepare

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seen = []
    hparams, settings = make_hparams(), make_settings(max_train_samples=32, max_eval_samples=16, deterministic=True)
    original = torch.nn.Module.__call__
    monkeypatch.setattr(torch.nn.Module, "__call__",
                        lambda self, *a, **k: (seen.append(torch.are_deterministic_algorithms_enabled()),
                                               original(self, *a, **k))[1])
    on = train(hparams, settings)
    assert seen and all(seen) and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setattr(torch.nn.Module, "__call__", original)
    off = train(hparams, make_settings(max_train_samples=32, max_eval_samples=16))
    assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
    def values(result):
        return [{k: v for k, v in e.items() if k not in MEASURED_KEYS} for e in result.epochs]

    assert values(on) == values(off)  # CPU kernels are deterministic anyway
    prepare(hparams, settings)
    assert torch.are_deterministic_algorithms_enabled()
    prepare(hparams, make_settings(max_train_samples=32))
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("attention,precision", [("eager", "high"), ("sdpa", "highest")])
def test_a_run_loads_the_attention_kernel_and_sets_the_matmul_precision_its_settings_name(make_hparams, make_settings,
                                                                                         attention, precision):
    import torch

    from istar_tune.training.run import prepare

    try:
        run = prepare(make_hparams(), make_settings(max_train_samples=16, max_eval_samples=16,
                                                    attn_implementation=attention, matmul_precision=precision))
        assert run.model.config._attn_implementation == attention
        assert torch.get_float32_matmul_precision() == precision
    finally:
        torch.set_float32_matmul_precision("highest")


def test_an_unknown_attention_kernel_or_matmul_precision_is_refused_with_the_choices():
    from istar_tune.config import from_dict
    from istar_tune.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        from_dict(RunSettings, {"attn_implementation": "flash", "matmul_precision": "medium"})
    assert "attn_implementation must be one of sdpa, eager, got 'flash'" in str(err.value)
    assert "matmul_precision must be one of highest, high, got 'medium'" in str(err.value)


def test_cudnns_attention_kernel_is_turned_off_on_cuda_and_left_alone_on_a_cpu():
    import torch

    from istar_tune.training.run import use_attention_kernels

    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        use_attention_kernels(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        use_attention_kernels(torch.device("cuda", 0))  # sets a flag only: no CUDA needed to check it
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)


def test_length_buckets_pad_to_a_few_shapes_with_the_same_data_and_metrics(make_hparams, make_settings):
    """Batches padded to multiples of 16: the same tokens and labels, and one model evaluates to the same metrics up to
    the padding's float effects (padding is masked); a bucket that does not divide max_length is refused."""
    import dataclasses

    from istar_tune.config import from_dict
    from istar_tune.errors import ConfigError
    from istar_tune.training.evaluate import evaluate
    from istar_tune.training.run import prepare

    hparams = make_hparams(method="base", lam=0.0, epochs=1)
    plain = prepare(hparams, make_settings(max_train_samples=48, max_eval_samples=32, max_length=48))
    bucketed = dataclasses.replace(plain, collate=prepare(hparams, make_settings(
        max_train_samples=48, max_eval_samples=32, max_length=48, length_bucket=16)).collate)
    rows = [plain.data.train[i] for i in range(8)]
    a, b = plain.collate(rows), bucketed.collate(rows)
    assert b["input_ids"].shape[1] % 16 == 0 and torch.equal(b["input_ids"][:, :a["input_ids"].shape[1]],
                                                               a["input_ids"])
    assert torch.equal(a["labels"], b["labels"]) and b["attention_mask"][:, a["input_ids"].shape[1]:].sum() == 0
    plain.model.eval()
    seen, padded = evaluate(plain, None), evaluate(bucketed, None)
    assert padded["accuracy"] == seen["accuracy"]
    assert padded["eval_isoscore"] == pytest.approx(seen["eval_isoscore"], abs=1e-5)  # padding masked in the cloud
    with pytest.raises(ConfigError, match="length_bucket must be 0 .* or a divisor of max_length \\(48\\)"):
        from_dict(RunSettings, {"max_length": 48, "length_bucket": 20})


@pytest.mark.slow
def test_a_compiled_step_trains_on_cpu_near_eager_and_both_settings_are_recorded(glue_tiny, tmp_path):
    """``step_mode: compile`` with length buckets trains tiny-bert on a CPU; the run's config records both, and its
    numbers lie within the tolerance the setting states (dropout draws other masks when compiled)."""
    import json

    import yaml

    from istar_tune.cli import main
    from istar_tune.training.state import CONFIG_FILE, METRICS_FILE

    finals = {}
    for mode in ("eager", "compile"):
        out = tmp_path / mode
        assert main(["train", "--model", "tiny-bert", "--task", "sst2", "--method", "istar", "--data-dir",
                     str(glue_tiny), "--epochs", "1", "--batch-size", "8", "--max-length", "32", "--length-bucket", "8",
                     "--step-mode", mode, "--output-dir", str(out), "--no-progress"]) == 0
        settings = yaml.safe_load((out / CONFIG_FILE).read_text())["settings"]
        assert settings["step_mode"] == mode and settings["length_bucket"] == 8
        finals[mode] = json.loads((out / METRICS_FILE).read_text())["final"]
    for key in ("train_loss", "task_loss"):
        assert abs(finals["compile"][key] - finals["eager"][key]) <= 0.003 * abs(finals["eager"][key]), key
    assert abs(finals["compile"]["eval_isoscore_star"] - finals["eager"]["eval_isoscore_star"]) < 1e-4


def test_a_run_reuses_anothers_tokenised_data_only_where_it_would_read_the_same(make_hparams, make_settings):
    settings = make_settings(max_train_samples=32, max_eval_samples=16)
    first = prepare(make_hparams(), settings)
    other_rate = prepare(make_hparams(learning_rate=5e-3, method="base", lam=None), settings, data_of=first)
    assert other_rate.data is first.data and other_rate.tokenizer is first.tokenizer
    assert other_rate.model is not first.model  # its own model, built from its own seed
    other_seed = prepare(make_hparams(seed=7), settings, data_of=first)
    other_length = prepare(make_hparams(), make_settings(max_train_samples=32, max_eval_samples=16, max_length=32),
                           data_of=first)
    assert other_seed.data is not first.data and other_length.data is not first.data
    assert len(other_length.data.train) == len(first.data.train)
