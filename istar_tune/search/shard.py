"""A share of a search for one task of a job array (``search --shard K/N``; jobs/slurm/search.sbatch passes it for
``sbatch --array``): the searches' (model, task) pairs, in the order the spaces list them (models, then tasks, the
spaces one after another), dealt round-robin to N shards; shard K runs every group of its pairs, in every space that
holds them (so a seeds stage re-runs the groups its own shard's grid chose). Every shard writes to the same MLflow
experiment (one parent run a shard), so one table reads them all; each keeps its own results folder (its Ray
experiment, lock and resume state).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace

from istar_tune.errors import ConfigError
from istar_tune.search.spaces.space import SearchSpace


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 1) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def suffix(self) -> str:
        """What the shard's results folder adds to the search's name."""
        return f".shard-{self.index}-of-{self.count}"


def parse_shard(text: str) -> Shard:
    """``K/N`` with 1 ≤ K ≤ N."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if found is None or not 1 <= int(found.group(1)) <= int(found.group(2)):
        raise ConfigError(f"--shard {text!r} is not a shard: give K/N, the K-th of N shares (1 ≤ K ≤ N), e.g. 1/4")
    return Shard(int(found.group(1)), int(found.group(2)))


def pairs_of(spaces: list[SearchSpace]) -> list[tuple[str, str]]:
    """Every (model, task) pair of the spaces, once each, in the order they list them."""
    found: dict[tuple[str, str], None] = {}
    for space in spaces:
        for pair in space.pairs or itertools.product(space.models, space.tasks):
            found.setdefault(pair)
    return list(found)


def take_shard(spaces: list[SearchSpace], shard: Shard) -> list[SearchSpace | None]:
    """Each space narrowed to the shard's pairs; ``None`` for a space that holds none of them."""
    every = pairs_of(spaces)
    mine = [pair for i, pair in enumerate(every) if i % shard.count == shard.index - 1]
    if not mine:
        raise ConfigError(f"--shard {shard}: the search has {len(every)} (model, task) pair(s), so shard "
                          f"{shard.index} holds none: use at most {len(every)} shards (sbatch "
                          f"--array=0-{len(every) - 1})")
    taken = []
    for space in spaces:
        held = set(pairs_of([space]))
        keep = [pair for pair in mine if pair in held]
        if not keep:
            taken.append(None)
            continue
        narrowed = space.narrow(models=list(dict.fromkeys(m for m, _ in keep)),
                                tasks=list(dict.fromkeys(t for _, t in keep)))
        taken.append(replace(narrowed, pairs=tuple(keep)))
    return taken


def describe(spaces: list[SearchSpace], shard: Shard) -> str:
    """``shard 2/3: bert × rte, roberta × sst2`` (what a dry run and the search's first line say)."""
    pairs = pairs_of(spaces)
    return f"shard {shard}: " + ", ".join(f"{m} × {t}" for m, t in pairs)
