from __future__ import annotations

from istar_tune.search.spaces.cost import trial_seconds


def test_the_cost_model_grows_with_data_epochs_and_small_batches_and_i_star_costs_more():
    base = {"model": "bert", "task": "rte", "method": "base", "learning_rate": 3e-5, "batch_size": 32, "epochs": 3}
    assert trial_seconds({**base, "task": "qqp"}) > 50 * trial_seconds(base) / 2
    assert trial_seconds({**base, "epochs": 5}) > trial_seconds(base)
    assert trial_seconds({**base, "batch_size": 8}) > trial_seconds(base)
    assert trial_seconds({**base, "method": "istar"}) > trial_seconds(base)
    assert trial_seconds({**base, "model": "distilbert"}) < trial_seconds(base)
