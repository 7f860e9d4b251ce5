"""A grid's configurations: the product of its grid domains (other random domains drawn once per configuration),
and those that differ only in ``epochs`` as one shared trial (:func:`share_prefixes`)."""

from __future__ import annotations

import itertools
import random
from typing import Any

from istar_tune.trial_config import SHARED_EPOCHS_KEY


def grid_configs(base: dict[str, Any], domains: dict[str, Any], repeats: int, seed: int | None,
                 share_epochs: bool = False) -> list[dict]:
    """Every configuration of a grid: the product of the grid domains × ``repeats``, other random domains drawn
    once per configuration (seeded). ``share_epochs``: the configurations of a repeat that differ only in
    ``epochs`` become one trial to the largest count that completes every count (:func:`share_prefixes`)."""
    rng = random.Random(seed)
    grids = {k: d.values for k, d in domains.items() if d.kind == "grid"}
    configs = []
    for _ in range(repeats):
        repeat = []
        for point in itertools.product(*grids.values()):
            config = {**base, **dict(zip(grids, point))}
            for key, domain in domains.items():
                if domain.kind != "grid":
                    config[key] = domain.sample(rng)
            repeat.append(config)
        configs += share_prefixes(repeat) if share_epochs else repeat
    return configs


def share_prefixes(configs: list[dict]) -> list[dict]:
    """Configurations that differ only in ``epochs`` as one trial each: the largest count, with every count it
    completes under :data:`~istar_tune.trial_config.SHARED_EPOCHS_KEY` (a configuration alone stays as it is)."""
    merged: dict[tuple, list[dict]] = {}
    for config in configs:
        key = tuple(sorted((k, repr(v)) for k, v in config.items() if k != "epochs"))
        merged.setdefault(key, []).append(config)
    trials = []
    for same in merged.values():
        counts = sorted({int(c["epochs"]) for c in same})
        if len(counts) < len(same) or len(counts) == 1:
            trials += same  # repeated counts (or one count): nothing is a prefix of something else
            continue
        trials.append({**same[0], "epochs": counts[-1], SHARED_EPOCHS_KEY: counts})
    return trials
