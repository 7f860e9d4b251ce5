"""``search.algorithm: random``: each trial's values drawn independently from the ranges and choices (Ray Tune's own
domain sampling, the draws ``tune.run`` makes without a searcher), from a generator seeded with ``search.seed``:
``num_samples`` trials a group, none waiting on another's result. Not Optuna: no study, no storage; its state (the
generator's) travels with the searcher's saved state, so a ``--resume`` draws on where it stopped."""

from __future__ import annotations

from typing import Any

import numpy as np

from istar_tune.search.backends.backend import Backend, Sampling


class RandomSearcher:
    """Draws every sampled hyperparameter of a group from its Tune domain; ``points`` first. What the group searcher
    asks of a group's searcher (``suggest``, ``on_trial_result``, ``on_trial_complete``); its state is pickled with the
    group searcher's."""

    def __init__(self, space: dict[str, Any], seed: int | None, points: list[dict]):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.points = [dict(p) for p in points if p]

    def suggest(self, trial_id: str) -> dict[str, Any]:
        if self.points:
            return self.points.pop(0)
        return {key: domain.sample(random_state=self.rng) for key, domain in self.space.items()}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Random draws learn nothing from results."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Random draws learn nothing from results."""


def random_searcher(sampling: Sampling) -> RandomSearcher:
    return RandomSearcher(sampling.space, sampling.seed, sampling.points)


RANDOM = Backend(name="random", kinds=("choice", "loguniform", "uniform", "randint"), enumerates=False,
                 summary="independent random draws from the ranges and choices (Ray Tune's sampling, seeded)",
                 searcher=random_searcher)
