from __future__ import annotations

import pickle

import numpy as np
import pytest
from ray import tune

from istar_tune.errors import ConfigError
from istar_tune.replay import schedulers
from istar_tune.replay.curves import Curve
from istar_tune.search.backends import Sampling
from istar_tune.search.backends.random_draws import RANDOM, RandomSearcher, distinct_configurations

SPACE = {"learning_rate": tune.loguniform(1e-5, 1e-3), "batch_size": tune.choice([16, 32]),
         "epochs": tune.randint(1, 4)}


def _searcher(seed=0, points=()):
    return RANDOM.build_searcher(Sampling(space=SPACE, metric="objective", mode="max", seed=seed,
                                          points=list(points)))


def test_random_draws_lie_in_their_domains_and_repeat_with_the_seed():
    first = [_searcher(5).suggest(str(i)) for i in range(1)]
    searcher, again = _searcher(5), _searcher(5)
    draws = [searcher.suggest(str(i)) for i in range(20)]
    assert draws == [again.suggest(str(i)) for i in range(20)] and draws[0] == first[0]
    assert all(1e-5 <= d["learning_rate"] <= 1e-3 and d["batch_size"] in (16, 32) and 1 <= d["epochs"] < 4
               for d in draws)
    assert len({d["learning_rate"] for d in draws}) == 20 and {d["batch_size"] for d in draws} == {16, 32}
    assert draws != [_searcher(6).suggest(str(i)) for i in range(20)]


def test_points_come_first_and_a_restored_searcher_draws_on_where_it_stopped():
    point = {"learning_rate": 3e-5, "batch_size": 16, "epochs": 2}
    searcher = _searcher(1, [point])
    assert isinstance(searcher, RandomSearcher) and searcher.suggest("a") == point
    searcher.suggest("b")
    searcher.on_trial_result("b", {"objective": 0.5})
    searcher.on_trial_complete("b", {"objective": 0.5})
    restored = pickle.loads(pickle.dumps(searcher))  # as the group searcher's saved state carries it
    assert [restored.suggest(str(i)) for i in range(3)] == [searcher.suggest(str(i)) for i in range(3)]


GRID = {"learning_rate": tune.choice([1e-5, 2e-5, 3e-5]), "epochs": tune.choice([1, 2])}
"""Six configurations: the values of a grid, searched at random (what ``--strategy-from`` makes of the replay's
random search)."""


def test_a_finite_space_is_drawn_without_replacement_and_then_refused():
    searcher = RANDOM.build_searcher(Sampling(space=GRID, metric="objective", mode="max", seed=3,
                                              points=[{"learning_rate": 2e-5, "epochs": 1}]))
    draws = [searcher.suggest(str(i)) for i in range(6)]
    assert draws[0] == {"learning_rate": 2e-5, "epochs": 1}
    assert sorted((d["learning_rate"], d["epochs"]) for d in draws) == [(lr, e) for lr in (1e-5, 2e-5, 3e-5)
                                                                        for e in (1, 2)]
    with pytest.raises(ConfigError, match="drawn all 6 distinct configurations"):
        searcher.suggest("7")
    assert distinct_configurations(SPACE) is None and distinct_configurations(
        {"batch_size": tune.choice([16, 32]), "epochs": tune.randint(1, 4)}) == 6


def test_random_k_of_a_grid_finds_its_best_as_often_as_the_replays_random_search():
    """k = 3 of 6 holds the best with probability C(5, 2) / C(6, 3) = 1/2 (with replacement it would be
    1 − (5/6)³ ≈ 0.42): the backend's draws and the replay's agree with it, over 2,000 seeds each (4 standard
    errors: 0.045)."""
    best, runs = {"learning_rate": 3e-5, "epochs": 2}, 2000
    found = 0
    for seed in range(runs):
        searcher = RANDOM.build_searcher(Sampling(space=GRID, metric="objective", mode="max", seed=seed))
        found += best in [searcher.suggest(str(i)) for i in range(3)]
    configs = [{"method": "base", "learning_rate": lr, "epochs": e} for lr in (1e-5, 2e-5, 3e-5) for e in (1, 2)]
    curves = [Curve(c, tuple(0.5 + 0.01 * i for _ in range(c["epochs"]))) for i, c in enumerate(configs)]
    rng = np.random.default_rng(0)
    replayed = sum(schedulers.random_search(curves, rng, k=3).chosen[0] == 5 for _ in range(runs))
    assert abs(found / runs - 0.5) < 0.045 and abs(replayed / runs - 0.5) < 0.045


def test_a_state_saved_before_draws_were_distinct_restores_and_draws_on():
    searcher = RANDOM.build_searcher(Sampling(space=GRID, metric="objective", mode="max", seed=4))
    state = {k: v for k, v in searcher.__dict__.items() if k not in ("distinct", "drawn")}  # an older version's
    older = RandomSearcher.__new__(RandomSearcher)
    older.__setstate__(state)
    assert older.distinct == 6 and len({tuple(older.suggest(str(i)).values()) for i in range(6)}) == 6
