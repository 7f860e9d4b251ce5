from __future__ import annotations


def test_sigma_s_draws_a_fresh_seeded_random_sample_of_the_whole_training_set_each_time():
    from istar_tune.training.sigma import shrinkage_order

    first, second = shrinkage_order(1000, seed=42, draw=0), shrinkage_order(1000, seed=42, draw=1)
    assert sorted(first) == list(range(1000)) and first != second
    assert shrinkage_order(1000, seed=42, draw=1) == second  # the same seed draws the same sample
    assert max(first[:100]) > 500 and min(first[:100]) < 500  # a budget's worth spans the whole file


def test_with_layer_set_sigma_s_is_the_covariance_of_that_layers_tokens(make_hparams, make_settings):
    import torch

    from istar_tune.training.forward import model_inputs
    from istar_tune.training.run import prepare
    from istar_tune.training.sigma import estimate_shrinkage

    run = prepare(make_hparams(task="rte", layer=2), make_settings(max_train_samples=8, shrinkage_tokens=10**6))
    sigma = estimate_shrinkage(run).double()
    run.model.eval()
    points = []
    with torch.no_grad():
        for batch in run.loader(run.data.train, 4):
            hidden = run.model(**model_inputs(batch), output_hidden_states=True).hidden_states[2]  # (B, T, d)
            points.append(hidden[batch["attention_mask"].bool()].double())
    expected = torch.cov(torch.cat(points).T)
    assert torch.allclose(sigma, expected, rtol=1e-4, atol=1e-6)


def test_sigma_s_is_estimated_in_float32_under_a_mixed_precision_run(make_hparams, make_settings):
    import torch

    from istar_tune.training.run import prepare
    from istar_tune.training.sigma import estimate_shrinkage

    full = prepare(make_hparams(task="rte"), make_settings(max_train_samples=8, precision="fp32"))
    mixed = prepare(make_hparams(task="rte"), make_settings(max_train_samples=8, precision="bf16"))
    assert mixed.amp_dtype == torch.bfloat16  # the training pass autocasts; the Σ_S pass does not
    torch.testing.assert_close(estimate_shrinkage(mixed), estimate_shrinkage(full), rtol=0, atol=0)


def test_the_pretrained_models_sigma_is_computed_once_per_key_and_the_records_are_identical(
        make_hparams, make_settings, tmp_path, monkeypatch):
    import istar_tune.training.fitting as fitting
    import istar_tune.training.loop as loop

    draws = []
    estimate = fitting.estimate_shrinkage

    def counted(run, draw=0):
        draws.append(draw)
        return estimate(run, draw)

    monkeypatch.setattr(fitting, "estimate_shrinkage", counted)
    cache = tmp_path / "sigma-cache"

    def small(**overrides):
        return make_settings(max_train_samples=64, max_eval_samples=32, **overrides)

    alone = loop.train(make_hparams(epochs=1), small()).epochs
    assert draws.count(0) == 1
    first = loop.train(make_hparams(epochs=1), small(), sigma_cache=cache).epochs
    [kept] = list(cache.glob("*.pt"))
    # Another configuration of the same model × task × seed × settings reuses it: no draw-0 pass.
    second = loop.train(make_hparams(epochs=1, learning_rate=3e-3, lam=1.0), small(), sigma_cache=cache).epochs
    again = loop.train(make_hparams(epochs=1), small(), sigma_cache=cache).epochs
    assert draws.count(0) == 2 and list(cache.glob("*.pt")) == [kept]

    def same(records):
        return [{k: v for k, v in r.items() if k not in loop.MEASURED_KEYS} for r in records]

    assert same(alone) == same(first) == same(again) and same(second) != same(first)
    loop.train(make_hparams(epochs=1, seed=7), small(), sigma_cache=cache)  # another seed: another draw
    loop.train(make_hparams(epochs=1), small(max_length=32), sigma_cache=cache)  # other tokens
    assert draws.count(0) == 4 and len(list(cache.glob("*.pt"))) == 3


def test_an_unreadable_cached_sigma_is_computed_again(make_hparams, make_settings, tmp_path):
    from istar_tune.training.loop import MEASURED_KEYS, train

    cache = tmp_path / "sigma-cache"
    first = train(make_hparams(), make_settings(max_train_samples=64, max_eval_samples=32), sigma_cache=cache).epochs
    [kept] = list(cache.glob("*.pt"))
    kept.write_bytes(b"truncated")
    second = train(make_hparams(), make_settings(max_train_samples=64, max_eval_samples=32), sigma_cache=cache).epochs
    assert ([{k: v for k, v in r.items() if k not in MEASURED_KEYS} for r in first]
            == [{k: v for k, v in r.items() if k not in MEASURED_KEYS} for r in second])
    assert kept.stat().st_size > 100
