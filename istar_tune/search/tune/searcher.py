"""Every group of a search in one Tune experiment, each group's trials still compared only with each other.

A search runs as one Tune experiment so the cluster stays full: when one (model, task, method) group runs out of
trials, the next group's trials take the free GPUs instead of the cluster draining at the end of every group.
:class:`GroupSearcher` hands out each group's trials (a grid's configurations, or one sampling backend's searcher
per group) in an order from the cost model (:func:`istar_tune.search.spaces.cost.trial_seconds`): the longest and the
shortest remaining trial by turns, so no long trial starts last and short trials, spread over the whole search, never
arrive all at once (which would make the driver, not the GPUs, the limit at the end). A group can wait for another
(``after``): a seeds group in the same experiment as the search it re-runs gets its configurations when that search's
group has ended (its best trial re-run with each seed) and goes to the front of the queue.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from ray.tune.search import Searcher

from istar_tune.config import HYPERPARAMETER_KEYS
from istar_tune.metrics import best_scored
from istar_tune.search.backends import Sampling, canonical, get_backend
from istar_tune.search.spaces.cost import trial_seconds
from istar_tune.search.tune.trainable import configuration_results


@dataclass
class GroupQueue:
    """What the searcher has still to hand out for one group (explicit configurations, or a budget of a sampling
    backend's suggestions) and what it has out (not the plan: :class:`~istar_tune.search.plan.PlannedGroup`)."""

    key: str
    configs: list[dict] = field(default_factory=list)
    """Grid (or seeds) configurations still to hand out, the next one last (popped from the end)."""
    order: list[int] = field(default_factory=list)
    """Place in the search's hand-out order of each of ``configs`` (sampled: of each trial of the budget), the next
    one last."""
    budget: int = 0
    """Sampled: trials still to suggest."""
    base: dict[str, Any] = field(default_factory=dict)
    """Sampled: the values every suggestion gets (model, task, method, constants)."""
    sampled: dict[str, Any] = field(default_factory=dict)
    """Sampled: Tune domains of the sampled keys."""
    algorithm: str = "tpe"
    """Sampled: the sampling backend (:mod:`istar_tune.search.backends`) that builds the group's searcher."""
    estimate: float = 0.0
    """Modelled seconds of one of its sampled trials (grid configurations are estimated one by one)."""
    live: int = 0
    searcher: Any = None
    study: str = ""
    """Sampled: the group's study name (in ``GroupSearcher.storage`` where the backend keeps studies)."""
    points: list[dict] = field(default_factory=list)
    """Sampled: configurations to try first."""
    concurrency: int | None = None
    """Trials of this group at once (``None``: the searcher's setting)."""
    after: str = ""
    """Key of the group whose best trial this group re-runs with ``variants``; it waits until that group has
    ended."""
    variants: list[dict] = field(default_factory=list)
    """What each of its trials sets on the best configuration (the seed; a study's varied value and constants)."""
    waiting: bool = False
    note: str = ""
    """Why a released group has nothing to run (its source had no scored trial)."""

    def __setstate__(self, state: dict) -> None:
        """A queue pickled by an earlier version (a ``--resume`` of a search it started): its fields' new names."""
        if "optuna_space" in state:
            state["sampled"] = state.pop("optuna_space")
        state["algorithm"] = canonical(state.get("algorithm", "tpe"))
        self.__dict__.update(state)

    def next_place(self) -> int:
        return self.order[-1]

    @property
    def exhausted(self) -> bool:
        return not self.waiting and not self.configs and self.budget <= 0


GroupPlan = GroupQueue
"""The queue's earlier name, under which searcher states saved before it were pickled (read by a ``--resume``)."""


def best_trial(results: list[tuple[str, float | None, dict]]) -> tuple[str, float, dict] | None:
    """The best of ``(trial_id, last reported objective, config)`` by :func:`istar_tune.metrics.best_scored` (the rule
    :func:`istar_tune.tracking.best_trials` applies to the same trials read from MLflow)."""
    return best_scored(results, lambda r: r[2], lambda r: r[1])


def hand_out_order(plans: list[GroupQueue]) -> None:
    """Number every trial of every plan: the longest remaining and the shortest remaining by turns."""
    items = [(trial_seconds(config), p, i) for p, plan in enumerate(plans) for i, config in enumerate(plan.configs)]
    items += [(plan.estimate, p, -1) for p, plan in enumerate(plans) for _ in range(plan.budget)]
    items.sort(key=lambda item: -item[0])
    places: dict[int, list[tuple[int, int]]] = {p: [] for p in range(len(plans))}
    head, tail, place = 0, len(items) - 1, 0
    while head <= tail:
        for index in ((head,) if head == tail else (head, tail)):
            _, p, i = items[index]
            places[p].append((place, i))
            place += 1
        head, tail = head + 1, tail - 1
    for p, plan in enumerate(plans):
        numbered = sorted(places[p], reverse=True)  # the next one last
        plan.order = [n for n, _ in numbered]
        if plan.configs:
            plan.configs = [plan.configs[i] for _, i in numbered]


class GroupSearcher(Searcher):
    """Hands out the trials of every group in :func:`hand_out_order`, at most ``concurrency`` at once per group; one
    searcher per sampled group, built by its backend (seeded with ``seed``)."""

    def __init__(self, plans: list[GroupQueue], concurrency: int | None = None, seed: int | None = None,
                 metric: str = "objective", mode: str = "max", storage: str | None = None):
        super().__init__(metric=metric, mode=mode)
        hand_out_order(plans)
        self.plans = plans
        self.concurrency = concurrency
        self.seed = seed
        self.storage = storage
        self.owner: dict[str, int] = {}
        self.suggested = 0
        for plan in plans:
            plan.waiting = plan.waiting or bool(plan.after)
        keys = {plan.key: i for i, plan in enumerate(plans)}
        self.dependents: dict[int, list[int]] = {}
        for i, plan in enumerate(plans):
            if plan.after:
                if plan.after not in keys:
                    raise ValueError(f"group {plan.key} waits for {plan.after}, which is not in this experiment")
                self.dependents.setdefault(keys[plan.after], []).append(i)
        self.results: dict[int, list[tuple[str, float | None, dict]]] = {i: [] for i in self.dependents}
        """Per group with dependents: (trial id, last metric, config) of each trial that ended."""
        self.configs: dict[str, dict] = {}
        """Configurations of the live trials of groups with dependents."""
        self.released = 0
        self.paused: set[str] = set()
        """Trials paused by their group's scheduler: not counted in their group's live trials."""
        self.handed: dict[str, tuple[int, int, dict | None]] | None = {}
        """Every trial handed out: (group, place in the order, its configuration; ``None``: a sampled suggestion),
        what :meth:`give_back` returns to its group (``None``: restored from a state that did not record them)."""

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def _searcher(self, plan: GroupQueue):
        if plan.searcher is None:
            backend = get_backend(plan.algorithm)
            points = [{k: v for k, v in p.items() if k in plan.sampled} for p in plan.points]
            plan.searcher = backend.build_searcher(Sampling(
                space=plan.sampled, metric=self.metric, mode=self.mode, seed=self.seed,
                storage=self.storage if backend.keeps_studies else None, study=plan.study, points=points))
        return plan.searcher

    def suggest(self, trial_id: str):
        open_plans = [i for i, p in enumerate(self.plans) if not p.exhausted and not p.waiting
                      and p.live < (p.concurrency or self.concurrency or 2**31)]
        for index in sorted(open_plans, key=lambda i: self.plans[i].next_place()):
            plan = self.plans[index]
            if plan.configs:
                config = plan.configs.pop()
                self._hand(trial_id, index, plan.order.pop(), config)
            else:
                suggestion = self._searcher(plan).suggest(trial_id)
                if suggestion is None:
                    continue
                config = {**plan.base, **suggestion}
                plan.budget -= 1
                self._hand(trial_id, index, plan.order.pop(), None)
            plan.live += 1
            self.owner[trial_id] = index
            if index in self.dependents:
                self.configs[trial_id] = config
            self.suggested += 1
            return config
        if all(p.exhausted for p in self.plans):
            return Searcher.FINISHED
        return None

    def _hand(self, trial_id: str, index: int, place: int, config: dict | None) -> None:
        if self.handed is not None:
            self.handed[trial_id] = (index, place, config)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        index = self.owner.get(trial_id)
        if index is not None and self.plans[index].searcher is not None:
            self.plans[index].searcher.on_trial_result(trial_id, result)

    def on_pause(self, trial_id: str) -> None:
        """A paused trial (median stopping) leaves its group's place to a trial that waits."""
        if trial_id in self.owner and trial_id not in self.paused:
            self.paused.add(trial_id)
            self.plans[self.owner[trial_id]].live -= 1

    def on_unpause(self, trial_id: str) -> None:
        if trial_id in self.paused:
            self.paused.discard(trial_id)
            self.plans[self.owner[trial_id]].live += 1

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        index = self.owner.pop(trial_id, None)
        if index is None:
            return
        plan = self.plans[index]
        if trial_id in self.paused:  # ended while paused (the search was stopped): its place was given back already
            self.paused.discard(trial_id)
        else:
            plan.live -= 1
        if plan.searcher is not None:
            plan.searcher.on_trial_complete(trial_id, result=result, error=error)
        if index in self.dependents:
            config = self.configs.pop(trial_id, {})
            for cid, configuration, value, _, passed in configuration_results(trial_id, config, result):
                self.results[index].append((cid, None if error and not passed else value, configuration))
            if plan.exhausted and plan.live == 0:
                self._release(index)

    def _release(self, source: int) -> None:
        """Hand the dependents of a group that ended its best configuration, one trial per seed, first in line."""
        best = best_trial(self.results.pop(source))
        for index in self.dependents.pop(source):
            plan = self.plans[index]
            plan.waiting = False
            if best is None:
                plan.note = f"{self.plans[source].key} ended without a scored trial: nothing to re-run"
                continue
            hyperparameters = {k: v for k, v in best[2].items() if k in HYPERPARAMETER_KEYS and k != "seed"}
            plan.configs = [{**hyperparameters, **plan.base, **variant} for variant in reversed(plan.variants)]
            self.released += 1
            plan.order = [-(2**40) + self.released] * len(plan.configs)  # before every group that never waited

    def give_back(self, trial_ids: set[str]) -> None:
        """Take back what was handed out to ``trial_ids`` (trials Tune's saved state lost): each configuration goes
        back to its place in its group's order (a sampled suggestion: one more trial of the budget)."""
        for trial_id in trial_ids:
            if trial_id not in (self.handed or {}):
                continue
            index, place, config = self.handed.pop(trial_id)
            plan = self.plans[index]
            at = sum(p > place for p in plan.order)  # the order runs from the last place to the next one
            plan.order.insert(at, place)
            if config is None:
                plan.budget += 1
            else:
                plan.configs.insert(at, config)
            if self.owner.pop(trial_id, None) is not None and trial_id not in self.paused:
                plan.live -= 1
            self.paused.discard(trial_id)
            self.configs.pop(trial_id, None)
            self.suggested -= 1

    def save(self, checkpoint_path: str):
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.__dict__, handle)

    def restore(self, checkpoint_path: str):
        with open(checkpoint_path, "rb") as handle:
            self.__dict__.update(pickle.load(handle))
        self.__dict__.setdefault("handed", None)  # a state saved before trials were recorded
        self.__dict__.setdefault("paused", set())
