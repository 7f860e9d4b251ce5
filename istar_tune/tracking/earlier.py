"""The trial runs an earlier driver of a search left in MLflow, read once when a (resumed) search writes its first
run: what the writer continues instead of creating duplicates.

A run is found again by its trial-id tag. A trial that Tune's restored state does not hold (lost with a state cut
short, or handed out after its last write) runs its configuration again under a new trial id: its run is then
taken over by that trial (:class:`Takeover`), matched by the configuration's logged hyperparameters, so every
configuration keeps one run. :class:`KnownRuns` is the writer's book of them, with the runs it creates itself: which
run a trial writes to, the last epoch it holds, which runs an earlier driver left without params (repaired at the
trial's next start) or running (ended when Tune says, or when Tune no longer knows the trial).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from istar_tune.tracking.naming import SETTING_PREFIX, logged_params
from istar_tune.tracking.store import (
    TAG_ERROR,
    TAG_ROLE,
    TAG_SEARCH,
    TAG_SEARCH_RUN,
    TAG_STATUS,
    TAG_TRIAL_ID,
    find_runs,
)
from istar_tune.trial_status import TrialStatus

_CONFIGURATION = re.compile(r"-e\d+$")
"""A shared trial's configuration id: ``<trial id>-e<k>``."""


@dataclass(frozen=True)
class EarlierRun:
    run_id: str
    trial_id: str
    """The trial-id tag: a trial's id, or a shared trial's configuration id."""
    logged_epoch: int
    """The last epoch the run holds."""
    has_params: bool
    """False: the driver died between creating the run and writing its params (repaired at the trial's next start)."""
    unended: bool
    """A run of this search still ``running`` in the store."""
    identity: tuple
    """The configuration: its logged hyperparameters, run settings left out."""

    @property
    def trial(self) -> str:
        """The Tune trial that wrote it."""
        return _CONFIGURATION.sub("", self.trial_id)


def identity(params: dict[str, Any]) -> tuple:
    """A configuration as its run's params name it (its hyperparameters; the search's settings are not)."""
    return tuple(sorted((k, str(v)) for k, v in params.items() if not k.startswith(SETTING_PREFIX)))


def config_identity(config: dict[str, Any]) -> tuple:
    return identity(logged_params(config))


def earlier_runs(mlflow_client, experiment_id: str, search_name: str, search_run_id: str | None = None
                  ) -> list[EarlierRun]:
    """Every trial run of the experiment with a trial id (one paginated read); ``unended`` and a configuration only
    for this search's: its name, and its search run ``search_run_id`` where the run names one (a job array's other
    shards share the name, each with a search run of its own, and their trials are not this driver's to end)."""
    found = []
    for run in find_runs(mlflow_client, experiment_id, **{TAG_ROLE: "trial"}):
        trial_id = run.data.tags.get(TAG_TRIAL_ID)
        if not trial_id:
            continue
        tags = run.data.tags
        mine = (tags.get(TAG_SEARCH, search_name) == search_name
                and (search_run_id is None or tags.get(TAG_SEARCH_RUN, search_run_id) == search_run_id))
        found.append(EarlierRun(run.info.run_id, trial_id, int(run.data.metrics.get("epoch", 0)),
                                bool(run.data.params),
                                mine and run.data.tags.get(TAG_STATUS, TrialStatus.RUNNING) == TrialStatus.RUNNING,
                                identity(run.data.params) if mine else ()))
    return found


class Takeover:
    """The runs of this search whose trials Tune's restored state does not hold (``restored``: the trial ids it
    holds), by configuration: :meth:`claim` hands each to the first new trial of the same configuration."""

    def __init__(self, runs: list[EarlierRun], restored: set[str]):
        self._lock = threading.Lock()
        self._by_identity: dict[tuple, list[EarlierRun]] = {}
        for run in runs:  # a grid's repeats can hold one configuration several times: one run each
            if run.identity and run.has_params and run.trial not in restored:
                self._by_identity.setdefault(run.identity, []).append(run)

    def __len__(self) -> int:
        return sum(len(runs) for runs in self._by_identity.values())

    def claim(self, config: dict[str, Any]) -> EarlierRun | None:
        if not self._by_identity:
            return None
        with self._lock:
            runs = self._by_identity.get(config_identity(config))
            return runs.pop(0) if runs else None


class KnownRuns:
    """The runs a search's writer knows, by trial id: those an earlier driver of the search left (read once, by
    :meth:`load`, before the first run is created) and those the writer creates (:meth:`created`)."""

    def __init__(self, restored: set[str] | None = None):
        self.restored = restored
        """A resumed search: the trial ids Tune's restored state holds (the runs of its other trials are taken over
        by the trials that run their configurations again); ``None``: no run is taken over."""
        self.loaded = False
        self.logged_epoch: dict[str, int] = {}
        """The last epoch each trial's run holds."""
        self.unended: set[str] = set()
        """Trials whose run is running in the store: created by this writer, or left running by an earlier driver."""
        self._runs: dict[str, str] = {}
        self._incomplete: set[str] = set()
        self._takeover: Takeover | None = None
        self._lock = threading.Lock()

    def load(self, mlflow_client, experiment_id: str, search_name: str, search_run_id: str) -> None:
        """The runs of trials an earlier driver of this search created (:func:`earlier_runs`): one paginated read."""
        with self._lock:
            if self.loaded:
                return
            runs = earlier_runs(mlflow_client, experiment_id, search_name, search_run_id)
            for run in runs:
                if run.trial_id not in self._runs:
                    self._runs[run.trial_id] = run.run_id
                    self.logged_epoch[run.trial_id] = run.logged_epoch
                    if not run.has_params:
                        self._incomplete.add(run.trial_id)
                    if run.unended:
                        self.unended.add(run.trial_id)
            if self.restored is not None:
                self._takeover = Takeover(runs, self.restored)
            self.loaded = True

    def find(self, trial_id: str, config: dict[str, Any] | None) -> tuple[str | None, bool]:
        """The run ``trial_id`` writes to, or one it takes over by its configuration (``None``: it has none yet), and
        whether its params must be written now (an earlier driver created it without them: repaired at the trial's
        next start, when its configuration comes along)."""
        if trial_id in self._runs:
            repair = bool(config) and trial_id in self._incomplete
            if repair:
                self._incomplete.discard(trial_id)
            return self._runs[trial_id], repair
        taken = self._takeover.claim(config) if config and self._takeover is not None else None
        if taken is None:
            return None, False
        with self._lock:  # a configuration whose trial Tune's state lost: its run goes on
            self._runs.pop(taken.trial_id, None)
            self.unended.discard(taken.trial_id)
            self._runs[trial_id], self.logged_epoch[trial_id] = taken.run_id, taken.logged_epoch
            self.unended.add(trial_id)
        return taken.run_id, False

    def created(self, trial_id: str, run_id: str) -> None:
        self._runs[trial_id], self.logged_epoch[trial_id] = run_id, 0

    def lost(self, known: set[str], open_trials: set[str]) -> list[str]:
        """The trials whose runs are left running though Tune does not hold them (``known``) and this writer has no
        open trial of them: an earlier driver's run of a trial Tune lost with its last snapshot, never reported
        again. In order."""
        return sorted(self.unended - set(known) - open_trials)


def forget_error(mlflow_client, run_id: str) -> None:
    """Delete a run's error tag, if it has one (an earlier attempt's error does not describe the trial going on)."""
    from mlflow.exceptions import MlflowException

    try:
        mlflow_client.delete_tag(run_id, TAG_ERROR)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
