"""What a trial (or a training run) is: running, or how it ended. One type for every module that says it; its values
are the strings MLflow's ``istar_tune.status`` tag holds."""

from __future__ import annotations

from enum import Enum


class TrialStatus(str, Enum):
    """A trial's status: compares equal to its text (``TrialStatus.FINISHED == "finished"``) and prints as it."""

    RUNNING = "running"
    PENDING = "pending"
    """Planned, not started (``status`` counts these; no run exists for them yet)."""
    FINISHED = "finished"
    STOPPED_EARLY = "stopped_early"
    """Stopped by its scheduler (ASHA) before its last epoch."""
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    """Stopped by the search ending (Ctrl-C, SIGTERM, a systemic failure): ``--resume`` runs it again."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


RECORDED = (TrialStatus.RUNNING, TrialStatus.FINISHED, TrialStatus.STOPPED_EARLY, TrialStatus.FAILED,
            TrialStatus.INTERRUPTED)
"""The statuses a trial's MLflow run can hold."""
COUNTED = (TrialStatus.FINISHED, TrialStatus.STOPPED_EARLY)
"""The statuses whose score counts (tables, plots, ``status``, the best trial of a group)."""
