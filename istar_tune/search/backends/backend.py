"""What a search backend is: the value of ``search.algorithm`` that chooses it, the domain kinds it searches, whether
it hands out every configuration of a space or samples a budget of trials from a searcher that sees their results, and
(a sampling backend) how it builds that Tune searcher for one group."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sampling:
    """What a sampling backend's searcher for one group is built from."""

    space: dict[str, Any]
    """Tune domains of the group's sampled hyperparameters."""
    metric: str
    mode: str
    seed: int | None
    """``search.seed``."""
    storage: str | None = None
    """Where a backend that keeps studies (``keeps_studies``) keeps this group's (an RDB URL; ``None``: memory)."""
    study: str = ""
    """The group's study name (its group key)."""
    points: list[dict] = field(default_factory=list)
    """``search.points_to_evaluate``, restricted to the sampled keys: configurations to try first."""


@dataclass(frozen=True)
class Backend:
    name: str
    """``search.algorithm``'s value that chooses it."""
    kinds: tuple[str, ...]
    """The domain kinds it searches (a constant is searched by every backend)."""
    enumerates: bool
    """True: every configuration of the space's grid domains, ``num_samples`` times (each other domain drawn once a
    configuration); False: ``num_samples`` trials a group, suggested by a searcher that is told each trial's result."""
    summary: str
    """One line for the reference and the dry run."""
    searcher: Callable[[Sampling], Any] | None = None
    """A sampling backend: builds one group's searcher (a ``ray.tune.search.Searcher``, or any object with its
    ``suggest``, ``on_trial_result`` and ``on_trial_complete``; pickled with the search's state)."""
    sampler: Callable[[int | None], Any] | None = None
    """Shorthand for a backend that is an Optuna sampler: the sampler, seeded with ``search.seed`` (its searcher is
    Ray's ``OptunaSearch`` with a study per group in ``search.storage``)."""
    distinct: bool = False
    """Its searcher draws each configuration of a group at most once where the group's domains are all finite
    (choices, integer ranges): the space refuses a ``num_samples`` above their count."""
    keeps_studies: bool = False
    """Its searcher keeps its state in a database (``search.storage``, else ``optuna.db`` beside the results), which
    a ``--resume`` continues (true of every ``sampler`` backend)."""

    def __post_init__(self):
        if not self.enumerates and self.searcher is None and self.sampler is None:
            raise ValueError(f"backend {self.name!r} samples (enumerates=False) but gives neither searcher nor sampler")
        if self.sampler is not None:
            object.__setattr__(self, "keeps_studies", True)

    def trials(self, grid_sizes: Iterable[int], num_samples: int) -> int:
        """Trials of a group whose domains contribute ``grid_sizes`` grid points each."""
        return math.prod(grid_sizes) * num_samples if self.enumerates else num_samples

    def searches(self, kind: str) -> bool:
        """Whether it searches a domain of ``kind`` (a constant: every backend)."""
        return kind == "constant" or kind in self.kinds

    def build_searcher(self, sampling: Sampling) -> Any:
        """One group's Tune searcher: its own ``searcher``, or Ray's ``OptunaSearch`` over its ``sampler``."""
        if self.searcher is not None:
            return self.searcher(sampling)
        if self.sampler is None:
            raise ValueError(f"backend {self.name!r} enumerates its configurations: it builds no searcher")
        return optuna_searcher(self.sampler(sampling.seed), sampling)


def optuna_searcher(sampler: Any, sampling: Sampling) -> Any:
    """Ray's ``OptunaSearch`` over ``sampler``: the group's study (``sampling.study``) in ``sampling.storage``."""
    from ray.tune.search.optuna import OptunaSearch

    storage = None
    if sampling.storage:
        import optuna

        storage = optuna.storages.RDBStorage(sampling.storage)
    return OptunaSearch(space=sampling.space, metric=sampling.metric, mode=sampling.mode, sampler=sampler,
                        storage=storage, study_name=sampling.study or None,
                        points_to_evaluate=[p for p in sampling.points if p] or None)


def listed(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "none"
