"""Search strategies replayed on a grid's recorded curves: each trial's results are the ones its configuration's
trial reported, so a replay is exact arithmetic, no training. Each function takes the unit's curves, a seeded random
generator (the strategy's own randomness: the order trials start in, which trials it samples) and its setting, and
returns a :class:`~istar_tune.replay.curves.Choice`.

Every early-stopping scheduler (ASHA, asynchronous Hyperband, median stopping, conformal early stopping, and any one
registered) is replayed by driving the very object a search's group builds (:func:`driven`, Ray's own for the first
three): the search's and the replay's decisions are one code. It runs on ``workers`` parallel workers
(:func:`run_workers`): a worker takes the next trial in the order when it is free, each epoch takes its
configuration's modelled seconds, and the scheduler sees results in the order they finish (ties to the lower worker).
Random search and TPE, which no scheduler object runs, are replayed by functions of their own here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from istar_tune.replay.curves import Choice, Curve, choose

CONTINUE, STOP, PAUSE = "continue", "stop", "pause"
Decide = Callable[[int, int, float], str]
"""(trial index, epoch, reported score) → ``CONTINUE``, ``STOP`` or ``PAUSE`` (the trial yields its worker: it goes
on, from its next epoch, once no trial waits to start and every trial paused before it has gone on: Tune's FIFO
order of pending, then paused trials)."""


def run_workers(curves: Sequence[Curve], order: Sequence[int], workers: int, decide: Decide,
                completes: Mapping[int, Sequence[int]] | None = None, queue: dict | None = None) -> Choice:
    """Trials of ``order`` on ``workers`` workers, each epoch's result shown to ``decide`` as it finishes; a trial
    ends at its own epochs, when it fails, or when ``decide`` stops it; a paused one waits for a free worker. The
    choice: the best model among the trials' ends and, per ``completes`` (trial → epoch counts,
    :func:`~istar_tune.replay.curves.arms`), the shorter configurations a trial completed on its way
    (:func:`~istar_tune.replay.curves.choose`). ``queue``, when given, holds what waits while ``decide`` is asked:
    ``pending`` (trials not started) and ``paused`` (trial → the epoch it goes on with)."""
    pending = list(order)[::-1]  # the next one last
    place = {index: number for number, index in enumerate(order)}
    paused: dict[int, int] = {}
    running: list[tuple[float, int, int, int]] = []  # (finishes at, worker, trial, epoch)
    if queue is not None:
        queue.update(pending=pending, paused=paused)

    def start(worker: int, now: float) -> None:
        if pending:
            index, epoch = pending.pop(), 1
        elif paused:  # the trial that came first in the order goes on first
            index = min(paused, key=place.__getitem__)
            epoch = paused.pop(index)
        else:
            return
        heapq.heappush(running, (now + curves[index].epoch_seconds, worker, index, epoch))

    for worker in range(workers):
        start(worker, 0.0)
    ended, epochs, seconds = [], 0, 0.0
    while running:
        now, worker, index, epoch = heapq.heappop(running)
        curve = curves[index]
        epochs, seconds = epochs + 1, seconds + curve.epoch_seconds
        if not curve.reported(epoch):  # it failed in this epoch
            start(worker, now)
            continue
        action = decide(index, epoch, curve.score(epoch))
        if action == STOP or epoch >= curve.epochs:
            on_way = [(index, k) for k in (completes or {}).get(index, ()) if k < epoch]
            ended += [*on_way, (index, epoch)]
            start(worker, now)
        elif action == PAUSE:
            paused[index] = epoch + 1
            start(worker, now)
        else:
            heapq.heappush(running, (now + curve.epoch_seconds, worker, index, epoch + 1))
    return Choice(choose(curves, ended), epochs, seconds)


def random_search(curves: Sequence[Curve], rng: np.random.Generator, k: int) -> Choice:
    """``k`` configurations drawn without replacement, each trained to its own epochs; the best of them."""
    drawn = [int(i) for i in rng.choice(len(curves), size=min(k, len(curves)), replace=False)]
    ended = [(i, curves[i].epochs) for i in drawn if curves[i].reported(curves[i].epochs)]
    epochs = sum(curves[i].trained_epochs for i in drawn)
    seconds = sum(curves[i].trained_epochs * curves[i].epoch_seconds for i in drawn)
    return Choice(choose(curves, ended), epochs, seconds)


class _Trial:
    """What a scheduler object reads of a trial (hashable: Ray's key their records by it)."""

    def __init__(self, trial_id: str, config: Mapping[str, Any], status: str = "RUNNING"):
        self.trial_id, self.config, self.status = trial_id, dict(config), status


def driven(curves: Sequence[Curve], rng: np.random.Generator, build: Callable[[], Any], workers: int,
           metric: str = "objective", completes: Mapping[int, Sequence[int]] | None = None) -> Choice:
    """The scheduler object ``build()`` returns (a registered scheduler's, as the search builds it for a group) told
    every result as a search's group scheduler tells it (``training_iteration``, the metric; the trials waiting for a
    worker are the live pending and paused ones it may ask for), over the trials in a random order. A scheduler that
    draws from numpy's global generator (Ray's asynchronous Hyperband draws each trial's bracket there) draws from one
    seeded from ``rng``; the caller's global state is put back after."""
    order = [int(i) for i in rng.permutation(len(curves))]
    saved = np.random.get_state()
    np.random.seed(int(rng.integers(2**32)))
    try:
        scheduler, queue, trials = build(), {}, {}

        def live() -> list[_Trial]:
            waiting = [(i, "PENDING") for i in queue["pending"]] + [(i, "PAUSED") for i in queue["paused"]]
            return [_Trial(f"t{i}", curves[i].config, status) for i, status in waiting]

        controller = SimpleNamespace(get_live_trials=live, search_alg=None)

        def decide(index: int, epoch: int, value: float) -> str:
            if index not in trials:
                trials[index] = _Trial(f"t{index}", curves[index].config)
                scheduler.on_trial_add(controller, trials[index])
            action = scheduler.on_trial_result(controller, trials[index], {"training_iteration": epoch, metric: value})
            return {"STOP": STOP, "PAUSE": PAUSE}.get(action, CONTINUE)

        return run_workers(curves, order, workers, decide, completes, queue)
    finally:
        np.random.set_state(saved)


def tpe(curves: Sequence[Curve], rng: np.random.Generator, k: int) -> Choice:
    """Optuna's TPE sampler (its defaults, seeded from ``rng``) over the grid's values of each hyperparameter (the
    method first where methods are compared, then that method's own), ``k`` trials; each point it proposes is
    answered by that configuration's recorded score (a point proposed again is trained again, as a search would). A
    failed configuration answers as a failed trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=int(rng.integers(2 ** 31)))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    grid = _Proposals(curves)
    ended, epochs, seconds = [], 0, 0.0
    for _ in range(k):
        trial = study.ask()
        index = grid.propose(trial)
        if index is None:  # the grid is not a full product and lacks this point: nothing trained
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        curve = curves[index]
        trained = curve.trained_epochs
        epochs, seconds = epochs + trained, seconds + trained * curve.epoch_seconds
        value = curve.score()
        if math.isnan(value):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
            ended.append((index, curve.epochs))
    return Choice(choose(curves, ended), epochs, seconds)


class _Proposals:
    """A grid's configurations as TPE proposes them, one hyperparameter at a time: the method first, then the values
    that method's configurations take (a hyperparameter with one value is not asked). Read from the curves once: a
    proposal is then a few lookups, not a pass over the grid per hyperparameter."""

    def __init__(self, curves: Sequence[Curve]) -> None:
        self.keys = sorted({key for c in curves for key in c.config}, key=lambda key: (key != "method", key))
        methods = {c.config.get("method") for c in curves}
        self.values: dict[tuple[Any, str], list] = {}
        """(method, or None for the method itself, hyperparameter) → the values a proposal chooses among."""
        for key in self.keys:
            for method in ((None,) if key == "method" else methods):
                self.values[(method, key)] = sorted(
                    {c.config.get(key) for c in curves if method is None or c.config.get("method") == method},
                    key=_order_key)
        self.first: dict[tuple, int] = {}
        """Each proposal so far (the values chosen, in order) → the first configuration that holds it."""
        for index, curve in enumerate(curves):
            chosen: tuple = ()
            self.first.setdefault(chosen, index)
            for key, _ in self._asked(curve.config.get("method")):
                chosen += (curve.config.get(key),)
                self.first.setdefault(chosen, index)

    def _asked(self, method):
        """(hyperparameter, values) of each question a proposal asks for ``method`` (after the method itself)."""
        for key in self.keys:
            values = self.values[(None, key)] if key == "method" else self.values[(method, key)]
            if len(values) > 1:
                yield key, values

    def propose(self, trial) -> int | None:
        """The first configuration that holds what ``trial`` suggests; ``None`` for a combination the grid lacks
        (asked no further)."""
        method = self.values[(None, "method")][0] if (None, "method") in self.values else None
        chosen: tuple = ()
        for key in self.keys:
            values = self.values[(None, key)] if key == "method" else self.values[(method, key)]
            if len(values) < 2:
                continue
            value = trial.suggest_categorical(key if key == "method" or method is None else f"{method}.{key}", values)
            method = value if key == "method" else method
            chosen += (value,)
            if chosen not in self.first:
                return None
        return self.first[chosen]


def _order_key(value) -> tuple:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))
