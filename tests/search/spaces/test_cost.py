from __future__ import annotations

from istar_tune.search.spaces.cost import gpu_share, packing_of, trial_seconds


def test_the_cost_model_grows_with_data_epochs_and_small_batches_and_i_star_costs_more():
    base = {"model": "bert", "task": "rte", "method": "base", "learning_rate": 3e-5, "batch_size": 32, "epochs": 3}
    assert trial_seconds({**base, "task": "qqp"}) > 50 * trial_seconds(base) / 2
    assert trial_seconds({**base, "epochs": 5}) > trial_seconds(base)
    assert trial_seconds({**base, "batch_size": 8}) > trial_seconds(base)
    assert trial_seconds({**base, "method": "istar"}) > trial_seconds(base)
    assert trial_seconds({**base, "model": "distilbert"}) < trial_seconds(base)


def test_the_gpu_share_of_a_packing_fits_that_many_trials_on_one_gpu_and_reads_back_as_it():
    for packing in range(1, 17):
        share = gpu_share(packing)
        assert packing * share <= 1.0 and (packing + 1) * share > 1.0, packing  # Ray fits exactly `packing`
        assert packing_of(share) == packing
    assert (gpu_share(4), gpu_share(6), gpu_share(7)) == (0.25, 0.166, 0.142)  # not round()'s 0.167 and 0.143
