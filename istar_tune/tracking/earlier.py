"""The trial runs an earlier driver of a search left in MLflow, read once when a (resumed) search writes its first
run: what the writer continues instead of creating duplicates.

A run is found again by its trial-id tag. A trial that Tune's restored state does not hold (lost with a state cut
short, or handed out after its last write) runs its configuration again under a new trial id: its run is then
taken over by that trial (:class:`Takeover`), matched by the configuration's logged hyperparameters, so every
configuration keeps one run.
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


def forget_error(mlflow_client, run_id: str) -> None:
    """Delete a run's error tag, if it has one (an earlier attempt's error does not describe the trial going on)."""
    from mlflow.exceptions import MlflowException

    try:
        mlflow_client.delete_tag(run_id, TAG_ERROR)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
