"""``search.algorithm: random``: each trial's values drawn from the ranges and choices (Ray Tune's own domain
sampling, the draws ``tune.run`` makes without a searcher), from a generator seeded with ``search.seed``:
``num_samples`` trials a group, none waiting on another's result. Where every sampled hyperparameter of a group is
finite (choices, integer ranges) a configuration is drawn at most once, so ``random`` with ``num_samples: k`` over a
grid's values tries k distinct configurations of it, uniformly: what ``replay``'s random search replays (the space
refuses a ``num_samples`` above the count). Not Optuna: no study, no storage; its state (the generator's and the
configurations drawn) travels with the searcher's saved state, so a ``--resume`` draws on where it stopped."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from istar_tune.errors import ConfigError
from istar_tune.search.backends.backend import Backend, Sampling


def distinct_configurations(space: dict[str, Any]) -> int | None:
    """How many distinct configurations the Tune domains of ``space`` hold; ``None`` where one is continuous."""
    from ray.tune.search.sample import Categorical, Domain, Integer

    counts = []
    for domain in space.values():
        if isinstance(domain, Categorical):
            counts.append(len({repr(c) for c in domain.categories}))
        elif isinstance(domain, Integer):
            counts.append(max(domain.upper - domain.lower, 0))  # Tune's upper bound is exclusive
        elif isinstance(domain, Domain):
            return None
    return math.prod(counts)


def _key(config: dict[str, Any]) -> tuple:
    return tuple(sorted((key, repr(value)) for key, value in config.items()))


class RandomSearcher:
    """Draws every sampled hyperparameter of a group from its Tune domain; ``points`` first. What the group searcher
    asks of a group's searcher (``suggest``, ``on_trial_result``, ``on_trial_complete``); its state is pickled with the
    group searcher's."""

    def __init__(self, space: dict[str, Any], seed: int | None, points: list[dict]):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.points = [dict(p) for p in points if p]
        self.distinct = distinct_configurations(space)
        """The group's distinct configurations where finite: each is drawn at most once."""
        self.drawn: set[tuple] = set()

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A state saved before draws were distinct (no record of what was drawn) goes on drawing distinct ones from
        where it stopped."""
        self.__dict__.update({"distinct": distinct_configurations(state["space"]), "drawn": set(), **state})

    def suggest(self, trial_id: str) -> dict[str, Any]:
        if self.points:
            config = self.points.pop(0)
        elif self.distinct is None:
            return {key: domain.sample(random_state=self.rng) for key, domain in self.space.items()}
        elif len(self.drawn) >= self.distinct:
            raise ConfigError(f"random search has drawn all {self.distinct} distinct configurations of a group: "
                              f"lower search.num_samples to at most {self.distinct}, or use algorithm: grid")
        else:
            config = self._new_draw()
        self.drawn.add(_key(config))
        return config

    def _new_draw(self) -> dict[str, Any]:
        """A uniform draw among the configurations not drawn yet (draws rejected until one is new)."""
        while True:
            config = {key: domain.sample(random_state=self.rng) for key, domain in self.space.items()}
            if _key(config) not in self.drawn:
                return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Random draws learn nothing from results."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Random draws learn nothing from results."""


def random_searcher(sampling: Sampling) -> RandomSearcher:
    return RandomSearcher(sampling.space, sampling.seed, sampling.points)


RANDOM = Backend(name="random", kinds=("choice", "loguniform", "uniform", "randint"), enumerates=False,
                 summary="random draws from the ranges and choices (Ray Tune's sampling, seeded), a finite space's "
                         "configurations each at most once",
                 searcher=random_searcher, distinct=True)
