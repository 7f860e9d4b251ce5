"""The experiment's scheduler: first come, first served in the searcher's order, and one early-stopping scheduler
(:mod:`istar_tune.search.schedulers`) per group that asks for one, so early stopping compares only a group's trials.
"""

from __future__ import annotations

import collections
import itertools
import time

from ray import cloudpickle
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from istar_tune.config import trial_epochs
from istar_tune.search.schedulers import Rule, get_scheduler
from istar_tune.trial_config import trial_group

STOPPED_EARLY: set[str] = set()
"""Trials a group's scheduler stopped (in this driver): "stopped early" is the scheduler's word, and a trial that
ended early for any other reason (the search was stopped) is interrupted."""


class GroupScheduler(FIFOScheduler):
    """First come, first served in the searcher's order, and per group with a :class:`Rule` (ASHA, Hyperband, median
    stopping, or one of one's own) that group's own scheduler, created on its first trial, so trials are stopped
    early (or paused) only against trials of their own group. A trial paused at its last epoch (Ray's median rule
    does that to a trial it cannot judge yet) finishes instead: Tune would save it, and later restart it from its
    checkpoint with nothing left to train (what ``replay`` replays: such a trial ends there).

    Choosing the next trial does not scan every trial of the experiment (Tune's FIFO scheduler does, at every step
    of its event loop: at thousands of trials that is most of the driver's time); new trials are queued as they are
    added, and the full scan for retried or paused trials runs at most every ``rescan_s`` seconds.
    """

    def __init__(self, rules: dict[str, Rule] | None = None, rescan_s: float = 2.0):
        super().__init__()
        self.rules = {key: rule for key, rule in (rules or {}).items() if get_scheduler(rule.scheduler).build}
        self.rescan_s = rescan_s
        self.schedulers: dict[str, TrialScheduler] = {}
        self._queue: collections.deque = collections.deque()
        self._last_scan = 0.0

    def __getstate__(self):
        return {**self.__dict__, "_queue": collections.deque(), "_last_scan": 0.0}

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True

    def _of(self, trial) -> TrialScheduler | None:
        key = trial_group(trial.config)
        rule = self.rules.get(key)
        if rule is None:
            return None
        if key not in self.schedulers:
            self.schedulers[key] = get_scheduler(rule.scheduler).build(rule)
        return self.schedulers[key]

    def on_trial_add(self, tune_controller, trial):
        self._queue.append(trial)
        if (scheduler := self._of(trial)) is not None:
            scheduler.on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result):
        scheduler = self._of(trial)
        if scheduler is None:
            return TrialScheduler.CONTINUE
        decision = scheduler.on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.PAUSE and result.get("training_iteration", 0) >= trial_epochs(trial.config):
            decision = TrialScheduler.CONTINUE  # its last epoch: paused, Tune would restart it to train nothing
        if decision == TrialScheduler.STOP:
            STOPPED_EARLY.add(trial.trial_id)
        elif decision == TrialScheduler.PAUSE:  # Tune saves it and resumes it later; its group's slot is free
            _searcher(tune_controller, "on_pause", trial.trial_id)
        return decision

    def on_trial_complete(self, tune_controller, trial, result):
        if (scheduler := self._of(trial)) is not None:
            scheduler.on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller, trial):
        if (scheduler := self._of(trial)) is not None:
            scheduler.on_trial_error(tune_controller, trial)

    def on_trial_remove(self, tune_controller, trial):
        scheduler = self._of(trial)
        if scheduler is not None and trial.trial_id in getattr(scheduler, "_trial_info", {trial.trial_id: None}):
            scheduler.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller):
        from ray.tune.experiment import Trial

        while self._queue and self._queue[0].status not in (Trial.PENDING, Trial.PAUSED):
            self._queue.popleft()
        for trial in itertools.islice(self._queue, 64):
            if trial.status == Trial.PENDING:
                return trial
        now = time.monotonic()
        if now - self._last_scan < self.rescan_s:
            return None
        self._last_scan = now
        chosen = super().choose_trial_to_run(tune_controller)  # retried (PENDING again) or PAUSED trials
        if chosen is not None and chosen.status == Trial.PAUSED:
            _searcher(tune_controller, "on_unpause", chosen.trial_id)
        return chosen

    def debug_string(self) -> str:
        names = sorted({rule.scheduler for rule in self.rules.values()})
        return f"GroupScheduler: {', '.join(names)} in {len(self.rules)} groups" if names else "GroupScheduler: FIFO"

    def save(self, checkpoint_path: str):
        with open(checkpoint_path, "wb") as handle:
            cloudpickle.dump(self.__getstate__(), handle)  # Ray's median rule holds lambdas

    def restore(self, checkpoint_path: str):
        with open(checkpoint_path, "rb") as handle:
            self.__dict__.update(cloudpickle.load(handle))


def _searcher(tune_controller, hook: str, trial_id: str) -> None:
    """Tell the experiment's searcher that a trial paused or resumes (``on_pause``, ``on_unpause``), so a paused
    trial does not hold its group's place: a trial that waits takes its worker, as ``replay`` models median stopping."""
    searcher = getattr(getattr(tune_controller, "search_alg", None), "searcher", None)
    if searcher is not None:
        getattr(searcher, hook)(trial_id)
