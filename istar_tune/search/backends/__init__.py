"""Search backends: what hands out a group's trials. ``backend`` says what a backend is (the domain kinds it searches,
whether it enumerates a grid or samples a budget, how it builds a group's searcher); one module each: ``grid``,
``random_draws``, ``tpe`` (Optuna's), ``qmc``. A backend is one module here and one line in :data:`BACKENDS`, or
:func:`register` from anywhere, or an entry point of the group ``istar_tune.strategies`` in an installed distribution
(:mod:`istar_tune.search.plugins`); ``search.algorithm`` names it."""

from __future__ import annotations

from istar_tune.errors import ConfigError
from istar_tune.search import plugins
from istar_tune.search.backends.backend import Backend, Sampling, listed
from istar_tune.search.backends.grid import GRID
from istar_tune.search.backends.qmc import QMC
from istar_tune.search.backends.random_draws import RANDOM
from istar_tune.search.backends.tpe import TPE

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (GRID, RANDOM, TPE, QMC)}
ALIASES = {"optuna": "tpe", "optuna_tpe": "tpe"}
"""Earlier names of a backend, still read (with a note that says the new one)."""


def register(backend: Backend) -> Backend:
    """Make ``backend`` choosable as ``search.algorithm: <its name>`` (a name taken is refused)."""
    if backend.name in BACKENDS and BACKENDS[backend.name] is not backend or backend.name in ALIASES:
        raise ConfigError(f"search backend {backend.name!r} is registered already: choose another name")
    BACKENDS[backend.name] = backend
    return backend


def registered() -> dict[str, Backend]:
    """Every backend: the shipped ones, those registered, and those of installed entry points."""
    for _, found in plugins.loaded():
        if isinstance(found, Backend) and BACKENDS.get(found.name) is not found:
            register(found)
    return BACKENDS


def canonical(name: str) -> str:
    """The backend's name for ``name`` (an earlier name: the new one)."""
    return ALIASES.get(name, name)


def get_backend(name: str) -> Backend:
    found = registered().get(canonical(name))
    if found is None:
        raise ConfigError(f"unknown search.algorithm {name!r}: choose one of {', '.join(registered())}")
    return found


def refusal(algorithm: str, kind: str) -> str | None:
    """Why ``algorithm``'s backend cannot search a domain of ``kind``, naming the backends that can (``None``: it
    can)."""
    backend = get_backend(algorithm)
    if backend.searches(kind):
        return None
    takers = listed([b.name for b in registered().values() if b.searches(kind)])
    return f"{kind} values need search.algorithm: {takers}; with {backend.name} use {listed(list(backend.kinds))}"


__all__ = ["ALIASES", "BACKENDS", "Backend", "Sampling", "canonical", "get_backend", "refusal", "register",
           "registered"]
