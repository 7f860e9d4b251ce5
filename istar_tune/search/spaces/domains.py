"""Hyperparameter domains as a search-space YAML writes them (``key: value``, ``{grid: [...]}``, ``{choice: [...]}``,
``{loguniform|uniform|randint: [low, high]}``): each checked against the hyperparameter's type and range, every
problem reported through the caller's ``problem(key, text)``; and how many distinct configurations they hold, for a
backend that draws each at most once.
"""

from __future__ import annotations

import collections
import math

from istar_tune.config import Hyperparameters, from_dict
from istar_tune.errors import ConfigError
from istar_tune.search.backends import get_backend, refusal
from istar_tune.search.spaces.space import DOMAIN_KINDS, SEARCHED_KEYS, Domain, SearchSpace

MAX_DOMAIN_VALUES = 10_000
"""The most values one grid or choice lists (the paper's largest lists 6)."""


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def value_kind(value) -> str:
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def coerced(key: str, value):
    """``value`` as the hyperparameter's type (so 8 and 8.0 are the same grid point)."""
    try:
        return getattr(from_dict(Hyperparameters, {key: value}, source="grid"), key)
    except ConfigError:
        return value


def check_value(key: str, value, where: str, problem) -> None:
    try:
        from_dict(Hyperparameters, {key: value}, source=where)
    except ConfigError as err:
        for text in err.problems:
            problem(where, text.split(": ", 1)[-1])


def domains_from_yaml(raw, where: str, algorithm: str, problem) -> dict[str, Domain]:
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict):
        problem(where, f"must map hyperparameter names to domains, got {type(raw).__name__}")
        return {}
    domains = {}
    for key, spec in raw.items():
        at = f"{where}.{key}"
        if key not in SEARCHED_KEYS:
            problem(at, f"unknown hyperparameter (searchable: {', '.join(sorted(SEARCHED_KEYS))}); "
                        "models, tasks and methods are listed at the top level")
            continue
        if not isinstance(spec, dict):
            check_value(key, spec, at, problem)
            domains[key] = Domain("constant", (spec,))
            continue
        if len(spec) != 1 or next(iter(spec)) not in DOMAIN_KINDS:
            problem(at, f"a domain is a value or a mapping with one of {', '.join(DOMAIN_KINDS)}, got {spec!r}")
            continue
        kind, values = next(iter(spec.items()))
        if not isinstance(values, list) or not values:
            problem(at, f"{kind} needs a non-empty list, got {values!r}")
            continue
        if len(values) > MAX_DOMAIN_VALUES:  # before any per-value work
            problem(at, f"{kind} lists {len(values):,} values; a domain holds at most {MAX_DOMAIN_VALUES:,} (for "
                        "more, search a range with search.algorithm: tpe)")
            continue
        refused = refusal(algorithm, kind)
        if refused:
            problem(at, refused)
            continue
        if kind in ("loguniform", "uniform", "randint"):
            if len(values) != 2 or not all(is_number(v) for v in values) or not values[0] < values[1]:
                problem(at, f"{kind} needs [low, high] with low < high, got {values!r}")
                continue
            if kind == "loguniform" and values[0] <= 0:
                problem(at, f"loguniform needs low > 0, got {values[0]}")
                continue
            if kind == "randint" and not all(isinstance(v, int) for v in values):
                problem(at, f"randint needs integer bounds, got {values!r}")
                continue
        if kind in ("grid", "choice"):
            kinds = {value_kind(v) for v in values}
            if len(kinds) > 1:
                problem(at, f"{kind} mixes value kinds ({', '.join(sorted(kinds))}) in {values!r}: write them all "
                            "alike (numbers unquoted)")
                continue
            typed = [coerced(key, v) for v in values]
            counts = collections.Counter(repr(v) for v in typed)  # linear: a grid may hold many values
            duplicates = sorted(value for value, n in counts.items() if n > 1)
            if duplicates:
                problem(at, f"{kind} repeats {', '.join(duplicates)} in {values!r}: each value once")
                continue
        for value in values:
            check_value(key, value, at, problem)
        domains[key] = Domain(kind, tuple(values))
    return domains


def distinct_values(domain: Domain) -> int | None:
    """How many distinct values ``domain`` takes; ``None`` for a continuous range."""
    if domain.kind in ("uniform", "loguniform"):
        return None
    if domain.kind == "randint":
        return domain.values[1] - domain.values[0] + 1
    return len({repr(v) for v in domain.values})


def check_distinct_draws(space: SearchSpace, where) -> None:
    """A backend that draws each configuration of a finite group at most once (``random``) cannot draw more trials
    than the group has configurations."""
    if space.stage == "seeds" or not get_backend(space.algorithm).distinct:
        return
    for group in space.groups():
        counts = [distinct_values(domain) for domain in group.domains.values()]
        if None not in counts and space.num_samples > math.prod(counts):
            raise ConfigError(f"{where}: search.num_samples is {space.num_samples}, but {group.method} on "
                              f"{group.model} × {group.task} has {math.prod(counts)} distinct configuration(s) and "
                              f"search.algorithm {space.algorithm} draws each at most once: lower num_samples to "
                              f"{math.prod(counts)}, or widen the choices")
