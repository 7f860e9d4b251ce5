from __future__ import annotations

import pickle

from ray import tune

from istar_tune.search.backends import Sampling
from istar_tune.search.backends.random_draws import RANDOM, RandomSearcher

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
