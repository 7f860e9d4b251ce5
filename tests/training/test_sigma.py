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
    from istar_tune.training.setup import prepare
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

    from istar_tune.training.setup import prepare
    from istar_tune.training.sigma import estimate_shrinkage

    full = prepare(make_hparams(task="rte"), make_settings(max_train_samples=8, precision="fp32"))
    mixed = prepare(make_hparams(task="rte"), make_settings(max_train_samples=8, precision="bf16"))
    assert mixed.amp_dtype == torch.bfloat16  # the training pass autocasts; the Σ_S pass does not
    torch.testing.assert_close(estimate_shrinkage(mixed), estimate_shrinkage(full), rtol=0, atol=0)
