"""Strategies from installed distributions: each entry point of the group :data:`GROUP` names a
:class:`~istar_tune.search.backends.Backend` (a ``search.algorithm``) or a
:class:`~istar_tune.search.schedulers.Scheduler` (a ``scheduler.type``), or a function that returns one; they are
registered the first time a registry is read, so a search space names them like the shipped ones:

.. code-block:: toml

    [project.entry-points."istar_tune.strategies"]
    halton = "my_package.strategies:HALTON"
"""

from __future__ import annotations

import logging
import sys
import types
from importlib.metadata import entry_points
from typing import Any

from istar_tune.errors import ConfigError

GROUP = "istar_tune.strategies"
log = logging.getLogger(__name__)
_loaded: dict[str, tuple[str, Any]] = {}
"""Each entry point loaded: its key → (where it comes from, the object)."""


_scanned: dict[tuple[str, ...], tuple] = {}
"""The entry points found, by the ``sys.path`` they were found on (a scan takes milliseconds, and the registries are
read for every group of a plan)."""


def _points() -> tuple:
    key = tuple(sys.path)
    if key not in _scanned:
        _scanned.clear()
        _scanned[key] = tuple(entry_points(group=GROUP))
    return _scanned[key]


def loaded() -> list[tuple[str, Any]]:
    """Every entry point of :data:`GROUP`, loaded once: (where it comes from, in words; the object it names, a
    function called). The registries take the backends and schedulers among them
    (:func:`istar_tune.search.backends.registered`, :func:`istar_tune.search.schedulers.registered`); one that fails
    to load is refused in one line naming it and its distribution."""
    for point in _points():
        key = f"{point.name}={point.value}"
        if key in _loaded:
            continue
        where = f"entry point {point.name!r} ({point.value}) of {GROUP}"
        if point.dist is not None:
            where += f" in {point.dist.name} {point.dist.version}"
        try:
            found = point.load()
            if isinstance(found, types.FunctionType):
                found = found()
        except Exception as err:
            raise ConfigError(f"{where} failed to load: {type(err).__name__}: {err}") from err
        _loaded[key] = (where, found)
        log.debug("loaded %s", where)
    return list(_loaded.values())
