"""A grid's configurations: the product of its grid domains times its repeats, and configurations that differ only in
``epochs`` as one shared trial to the largest count."""

from __future__ import annotations

from istar_tune.search.spaces.grid import grid_configs, share_prefixes
from istar_tune.search.spaces.space import Domain
from istar_tune.trial_config import SHARED_EPOCHS_KEY


def test_configurations_that_differ_only_in_epochs_share_a_trial_to_the_largest_count():
    domains = {"epochs": Domain("grid", (1, 3, 2)), "learning_rate": Domain("grid", (1e-3, 2e-3))}
    configs = grid_configs({"model": "bert"}, domains, repeats=1, seed=0)
    assert len(configs) == 6
    shared = grid_configs({"model": "bert"}, domains, repeats=1, seed=0, share_epochs=True)
    assert [(c["learning_rate"], c["epochs"], c[SHARED_EPOCHS_KEY]) for c in shared] == [
        (1e-3, 3, [1, 2, 3]), (2e-3, 3, [1, 2, 3])]


def test_repeated_or_single_epoch_counts_share_nothing():
    same = [{"model": "bert", "epochs": 2}, {"model": "bert", "epochs": 2}]
    assert share_prefixes(same) == same
    alone = [{"model": "bert", "epochs": 2, "learning_rate": 1e-3}]
    assert share_prefixes(alone) == alone
