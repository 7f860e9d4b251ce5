"""Search backends: what hands out a group's trials. A backend is one module here and one line in
:data:`BACKENDS` (or :func:`register` from anywhere); ``search.algorithm`` names it."""

from __future__ import annotations

from istar_tune.errors import ConfigError
from istar_tune.search.backends.backend import Backend, listed
from istar_tune.search.backends.grid import GRID
from istar_tune.search.backends.optuna_qmc import QMC
from istar_tune.search.backends.optuna_tpe import TPE

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (GRID, TPE, QMC)}


def register(backend: Backend) -> Backend:
    """Make ``backend`` choosable as ``search.algorithm: <its name>`` (a name taken is refused)."""
    if backend.name in BACKENDS and BACKENDS[backend.name] is not backend:
        raise ConfigError(f"search backend {backend.name!r} is registered already: choose another name")
    BACKENDS[backend.name] = backend
    return backend


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ConfigError(f"unknown search.algorithm {name!r}: choose one of {', '.join(BACKENDS)}")
    return BACKENDS[name]


def refusal(algorithm: str, kind: str) -> str | None:
    """Why ``algorithm``'s backend cannot search a domain of ``kind``, naming the backends that can (``None``: it
    can)."""
    backend = get_backend(algorithm)
    if backend.searches(kind):
        return None
    takers = listed([b.name for b in BACKENDS.values() if b.searches(kind)])
    return f"{kind} values need search.algorithm: {takers}; with {backend.name} use {listed(list(backend.kinds))}"


__all__ = ["BACKENDS", "Backend", "get_backend", "refusal", "register"]
