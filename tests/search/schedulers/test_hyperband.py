from __future__ import annotations

import itertools

import numpy as np
from ray.tune.schedulers import AsyncHyperBandScheduler

from istar_tune.replay import schedulers as replayed
from istar_tune.replay.curves import Curve
from istar_tune.search.schedulers.hyperband import HYPERBAND, brackets
from istar_tune.search.schedulers.scheduler import Rule


class Draws:
    """A generator whose permutation is the identity and whose bracket draws are given."""

    def __init__(self, draws):
        self.draws = draws

    def permutation(self, n):
        return np.arange(n)

    def choice(self, n, size, p):
        return np.array(self.draws[:size])


def test_the_search_runs_as_many_brackets_as_the_replay_models():
    for horizon, grace, eta in itertools.product((1, 2, 3, 5, 9, 27), (1, 2, 3), (2, 3, 4)):
        if grace > horizon:
            continue
        rule = Rule("hyperband", horizon=horizon, grace_period=grace, reduction_factor=eta)
        built = HYPERBAND.build(rule)
        assert isinstance(built, AsyncHyperBandScheduler) and len(built._brackets) == brackets(horizon, grace, eta)
        curves = [Curve(config={"i": i, "epochs": horizon}, values=(0.5,) * horizon) for i in range(2)]
        last = brackets(horizon, grace, eta) - 1
        # the replay's last bracket exists (a draw into it is taken) and one past it does not
        replayed.asha(curves, Draws([last, last]), grace, eta, 1, brackets=horizon)
        try:
            replayed.asha(curves, Draws([last + 1, last + 1]), grace, eta, 1, brackets=horizon)
        except IndexError:
            pass
        else:
            raise AssertionError(f"the replay runs more than {last + 1} brackets at {horizon}, {grace}, {eta}")


def test_every_bracket_ends_at_the_horizon_and_a_later_one_starts_later():
    built = HYPERBAND.build(Rule("hyperband", horizon=9, grace_period=1, reduction_factor=3))
    assert [[rung for rung, _ in bracket._rungs] for bracket in built._brackets] == [[9, 3, 1], [9, 3], [9]]
