from __future__ import annotations

import itertools

import numpy as np
from ray.tune.schedulers import AsyncHyperBandScheduler

from istar_tune.replay import schedulers as replayed
from istar_tune.replay.curves import Curve
from istar_tune.search.schedulers.hyperband import HYPERBAND, brackets
from istar_tune.search.schedulers.scheduler import Rule


def test_the_search_runs_one_bracket_per_rung_the_horizon_holds():
    """As many brackets as rungs ``grace · η^k`` up to the horizon (counted here by hand); the replay drives this
    same object, so the search and the replay run the same brackets."""
    for horizon, grace, eta in itertools.product((1, 2, 3, 5, 9, 27), (1, 2, 3), (2, 3, 4)):
        if grace > horizon:
            continue
        rungs = 0
        while grace * eta**rungs <= horizon:
            rungs += 1
        built = HYPERBAND.build(Rule("hyperband", horizon=horizon, grace_period=grace, reduction_factor=eta))
        assert isinstance(built, AsyncHyperBandScheduler) and len(built._brackets) == brackets(horizon, grace, eta)
        assert brackets(horizon, grace, eta) == rungs, (horizon, grace, eta)


def test_the_replay_draws_brackets_as_ray_does_from_a_generator_it_seeds_and_puts_the_global_one_back():
    curves = [Curve(config={"i": i, "epochs": 9}, values=(0.5 + i / 100,) * 9) for i in range(12)]
    rule = Rule("hyperband", horizon=9, grace_period=1, reduction_factor=3)
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    runs = [replayed.driven(curves, np.random.default_rng(seed), lambda: HYPERBAND.build(rule), workers=2)
            for seed in (1, 1, 2)]
    assert runs[0] == runs[1] and (np.random.get_state()[1] == before).all()


def test_every_bracket_ends_at_the_horizon_and_a_later_one_starts_later():
    built = HYPERBAND.build(Rule("hyperband", horizon=9, grace_period=1, reduction_factor=3))
    assert [[rung for rung, _ in bracket._rungs] for bracket in built._brackets] == [[9, 3, 1], [9, 3], [9]]
