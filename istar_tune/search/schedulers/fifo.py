"""``scheduler.type: none``: every trial runs every epoch it asks for."""

from __future__ import annotations

from istar_tune.search.schedulers.scheduler import Scheduler

NONE = Scheduler(name="none", summary="no early stopping: every trial runs to its epochs")
