"""The configurations a trial's results stand for: the trial itself, a shared trial's epoch counts, a fused trial's
members, each with the objective, epochs and ending its run reads."""

from __future__ import annotations

from istar_tune.search.tune.trainable import configuration_results, configurations
from istar_tune.trial_config import SHARED_EPOCHS_KEY, fuse

ERROR = "TrainingError: the loss became nan at epoch 1, step 3: lower the learning rate (0.002) or |lam| (-1.0)"


def _fused_config(epochs=(2, 2, 1)):
    base = {"model": "tiny-bert", "task": "rte", "method": "istar", "lam": -1.0, "zeta": 0.2, "search": "s"}
    configs = [{**base, "learning_rate": lr, "epochs": e} for lr, e in zip((1e-3, 2e-3, 3e-3), epochs)]
    (trial,) = fuse(configs, 4)
    return trial


def test_a_trial_stands_for_itself_and_a_shared_trial_for_each_epoch_count():
    plain = {"model": "tiny-bert", "task": "rte", "method": "base", "epochs": 3}
    assert configurations("t", plain) == [("t", plain, 3)]
    assert configuration_results("t", plain, {"epoch": 2, "objective": 0.5}) == [("t", plain, 0.5, 2, False)]
    shared = {**plain, SHARED_EPOCHS_KEY: [1, 3]}
    last = {"epoch": 2, "objective": 0.6, "objective_at_epoch_1": 0.4}
    ended = configuration_results("t", shared, last)
    assert [(cid, value, epochs, passed) for cid, _, value, epochs, passed in ended] == [
        ("t-e1", 0.4, 1, True), ("t-e3", 0.6, 2, False)]


def test_a_fused_trials_configurations_are_its_members_each_scored_on_its_own():
    config = _fused_config()
    members = [(cid, c["learning_rate"], k) for cid, c, k in configurations("b", config)]
    assert members == [("b-m0", 1e-3, 2), ("b-m1", 2e-3, 2), ("b-m2", 3e-3, 1)]
    last = {"epoch": 2, "m0/objective": 0.7, "m0/reached": 2, "m1/error": ERROR, "m2/objective": 0.5,
            "m2/reached": 1}
    ended = [(cid, value, epochs, passed) for cid, _, value, epochs, passed in configuration_results("b", config, last)]
    assert ended == [("b-m0", 0.7, 2, True), ("b-m1", None, 0, False), ("b-m2", 0.5, 1, True)]


def test_a_fused_trials_shared_member_stands_for_each_of_its_epoch_counts():
    """A member that is a shared trial (epochs {1, 3} under a constant learning rate): a configuration per epoch
    count (``-m<i>-e<k>``), each scored as the shared trial alone scores it; one it passed before its member failed
    counts as passed."""
    base = {"model": "tiny-bert", "task": "rte", "method": "istar", "lam": -1.0, "zeta": 0.2, "epochs": 3,
            SHARED_EPOCHS_KEY: [1, 3]}
    (config,) = fuse([{**base, "learning_rate": 1e-3}, {**base, "learning_rate": 2e-3}], 4)
    assert [(cid, k) for cid, _, k in configurations("b", config)] == [
        ("b-m0-e1", 1), ("b-m0-e3", 3), ("b-m1-e1", 1), ("b-m1-e3", 3)]
    last = {"epoch": 3, "m0/objective": 0.7, "m0/reached": 3, "m0/objective_at_epoch_1": 0.4,
            "m0/objective_at_epoch_3": 0.7, "m1/objective": 0.5, "m1/reached": 2, "m1/objective_at_epoch_1": 0.5,
            "m1/error": ERROR}
    ended = [(cid, value, epochs, passed) for cid, _, value, epochs, passed in configuration_results("b", config, last)]
    assert ended == [("b-m0-e1", 0.4, 1, True), ("b-m0-e3", 0.7, 3, True), ("b-m1-e1", 0.5, 1, True),
                     ("b-m1-e3", 0.5, 2, False)]
