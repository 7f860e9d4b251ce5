"""The experiment's scheduler: first come, first served in the searcher's order, and (with ASHA) one
ASHA instance per group, so early stopping compares only a group's trials.
"""

from __future__ import annotations

import collections
import itertools
import pickle
import time

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from istar_tune.trial_config import trial_group

STOPPED_EARLY: set[str] = set()
"""Trials a group's ASHA stopped (in this driver): "stopped early" is the scheduler's word, and a trial that ended
early for any other reason (the search was stopped) is interrupted."""


class GroupScheduler(FIFOScheduler):
    """First come, first served in the searcher's order, and (with ``asha``) one ASHA scheduler per group, created
    on the group's first trial, so trials are stopped early only against trials of their own group.

    Choosing the next trial does not scan every trial of the experiment (Tune's FIFO scheduler does, at every step
    of its event loop: at thousands of trials that is most of the driver's time); new trials are queued as they are
    added, and the full scan for retried or paused trials runs at most every ``rescan_s`` seconds.
    """

    def __init__(self, horizons: dict[str, int] | None = None, grace_period: int = 1, reduction_factor: float = 3.0,
                 metric: str = "objective", mode: str = "max", rescan_s: float = 2.0):
        super().__init__()
        self.horizons = horizons or {}
        self.asha = horizons is not None
        self.grace_period = grace_period
        self.reduction_factor = reduction_factor
        self._metric, self._mode = metric, mode
        self.rescan_s = rescan_s
        self.schedulers: dict[str, TrialScheduler] = {}
        self._queue: collections.deque = collections.deque()
        self._last_scan = 0.0

    def __getstate__(self):
        return {**self.__dict__, "_queue": collections.deque(), "_last_scan": 0.0}

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True

    def _of(self, trial) -> TrialScheduler | None:
        if not self.asha:
            return None
        key = trial_group(trial.config)
        if key not in self.schedulers:
            from ray.tune.schedulers import ASHAScheduler

            horizon = self.horizons.get(key) or max(self.horizons.values(), default=1)
            self.schedulers[key] = ASHAScheduler(time_attr="training_iteration", metric=self._metric, mode=self._mode,
                                                 max_t=horizon, grace_period=min(self.grace_period, horizon),
                                                 reduction_factor=self.reduction_factor)
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
        if decision == TrialScheduler.STOP:
            STOPPED_EARLY.add(trial.trial_id)
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
        return super().choose_trial_to_run(tune_controller)  # retried (PENDING again) or PAUSED trials

    def debug_string(self) -> str:
        return f"GroupScheduler: ASHA in {len(self.schedulers)} groups" if self.asha else "GroupScheduler: FIFO"

    def save(self, checkpoint_path: str):
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.__getstate__(), handle)

    def restore(self, checkpoint_path: str):
        with open(checkpoint_path, "rb") as handle:
            self.__dict__.update(pickle.load(handle))
