"""Early-stopping schedulers: what stops a group's weak trials. ``scheduler`` says what a scheduler is (the
``scheduler.*`` settings it reads, a group's ``Rule``, how it builds one group's Tune scheduler); one module each:
``fifo`` (none), ``asha``, ``hyperband``, ``median``, ``conformal`` (conformal early stopping, with its bound). A
scheduler is one module here and one line in :data:`SCHEDULERS`, or :func:`register` from anywhere, or an entry point
of the group ``istar_tune.strategies`` (:mod:`istar_tune.search.plugins`); ``scheduler.type`` names it. Each group of
a search gets its own instance (:class:`istar_tune.search.tune.scheduler.GroupScheduler`), so trials are compared
only within their group."""

from __future__ import annotations

from istar_tune.errors import ConfigError
from istar_tune.search import plugins
from istar_tune.search.backends import Backend
from istar_tune.search.schedulers.asha import ASHA
from istar_tune.search.schedulers.conformal import CONFORMAL
from istar_tune.search.schedulers.fifo import NONE
from istar_tune.search.schedulers.hyperband import HYPERBAND
from istar_tune.search.schedulers.median import MEDIAN
from istar_tune.search.schedulers.scheduler import Rule, Scheduler

SCHEDULERS: dict[str, Scheduler] = {s.name: s for s in (NONE, ASHA, HYPERBAND, MEDIAN, CONFORMAL)}
ALIASES = {"fifo": "none", "async_hyperband": "hyperband", "median_stopping": "median"}
"""Other names a scheduler is read by (with a note that says its name)."""


def register(scheduler: Scheduler) -> Scheduler:
    """Make ``scheduler`` choosable as ``scheduler.type: <its name>`` (a name taken is refused)."""
    taken = scheduler.name in SCHEDULERS and SCHEDULERS[scheduler.name] is not scheduler
    if taken or scheduler.name in ALIASES:
        raise ConfigError(f"scheduler {scheduler.name!r} is registered already: choose another name")
    SCHEDULERS[scheduler.name] = scheduler
    return scheduler


def registered() -> dict[str, Scheduler]:
    """Every scheduler: the shipped ones, those registered, and those of installed entry points (an entry point that
    is neither a scheduler nor a backend is refused, naming it)."""
    for where, found in plugins.loaded():
        if isinstance(found, Scheduler) and SCHEDULERS.get(found.name) is not found:
            register(found)
        elif not isinstance(found, (Scheduler, Backend)):
            raise ConfigError(f"{where} is a {type(found).__name__}: it must be a Backend "
                              "(istar_tune.search.backends) or a Scheduler (istar_tune.search.schedulers)")
    return SCHEDULERS


def stopping() -> tuple[str, ...]:
    """The registered schedulers that stop trials (every one but ``none``), plugins included."""
    return tuple(name for name, s in registered().items() if s.build is not None)


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def get_scheduler(name: str) -> Scheduler:
    found = registered().get(canonical(name))
    if found is None:
        raise ConfigError(f"unknown scheduler.type {name!r}: choose one of {', '.join(registered())}")
    return found


__all__ = ["ALIASES", "Rule", "SCHEDULERS", "Scheduler", "canonical", "get_scheduler", "register", "registered"]
