"""``search SPACE --strategy-from SOURCE``: a search strategy (the ``search:`` and ``scheduler:`` keys, and
``concurrency``) taken from a replay's recommendation (the experiment it replayed, read from MLflow) or from a YAML
file holding such a fragment (``replay/strategy.yaml`` of that run, or one's own), applied on top of the space's
own before it is read, so the usual checks hold."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

from istar_tune import tracking
from istar_tune.config import load_yaml
from istar_tune.errors import ConfigError
from istar_tune.search import backends

log = logging.getLogger(__name__)

KEYS = ("search", "scheduler", "concurrency")
"""What a strategy fragment may set."""


def read_strategy(source: str, tracking_uri: str) -> tuple[dict[str, Any], str]:
    """The fragment ``source`` names (a YAML file, else an experiment whose grid ``replay`` replayed) and where it came
    from, in words."""
    path = Path(source)
    if path.is_file():
        found, where = load_yaml(path), f"{path}"
    else:
        found, where = _replayed(source, tracking_uri), f"the replay of {source}"
    if not isinstance(found, dict) or not found or set(found) - set(KEYS):
        raise ConfigError(f"--strategy-from {source}: a strategy sets only {', '.join(KEYS)}, got "
                          f"{sorted(found) if isinstance(found, dict) else type(found).__name__}")
    return found, where


def _replayed(experiment: str, tracking_uri: str) -> dict[str, Any]:
    client = tracking.client(tracking_uri)
    try:
        experiment_id = tracking.get_experiment(client, tracking_uri, experiment).experiment_id
    except ConfigError as err:
        raise ConfigError(f"--strategy-from {experiment}: not a file, and {err}") from err
    parents = tracking.find_runs(client, experiment_id, **{tracking.TAG_ROLE: "search"})
    tags = parents[0].data.tags if parents else {}
    if tracking.TAG_STRATEGY not in tags:
        raise ConfigError(f"--strategy-from {experiment}: its search has not been replayed: run istar-tune replay "
                          f"--experiment {experiment} first")
    found = json.loads(tags[tracking.TAG_STRATEGY])
    if found is None:
        raise ConfigError(f"--strategy-from {experiment}: the replay recommended no strategy "
                          f"({tags.get(tracking.TAG_REPLAY, 'undecided')})")
    return found


def apply_strategy(raw: dict[str, Any], strategy: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``raw`` (a space's YAML) with the strategy's keys in place of its own (``search``: the keys given replace the
    space's, its seed and storage kept; ``scheduler`` replaced whole), and what changed beyond them: a sampling
    backend searches the grid values as choices (as the replay's random search and TPE drew them)."""
    merged = copy.deepcopy(raw)
    if "search" in strategy:
        merged["search"] = {**(merged.get("search") or {}), **strategy["search"]}
    for key in ("scheduler", "concurrency"):
        if key in strategy:
            merged[key] = copy.deepcopy(strategy[key])
    search = merged.get("search") if isinstance(merged.get("search"), dict) else {}
    algorithm = search.get("algorithm", "grid")
    if not isinstance(algorithm, str) or backends.canonical(algorithm) not in backends.registered():
        return merged, ""  # the space's reading names what is wrong with it
    searches_grids = backends.get_backend(algorithm).searches("grid")
    converted = 0
    if not searches_grids:
        domains = [merged.get("hyperparameters") or {}, *(merged.get("method_hyperparameters") or {}).values()]
        for section in domains:
            for key, value in list(section.items()) if isinstance(section, dict) else ():
                if isinstance(value, dict) and set(value) == {"grid"}:
                    section[key] = {"choice": value["grid"]}
                    converted += 1
    return merged, (f"{converted} grid domains searched as choices" if converted else "")


def registered_name(name, key: str, registry, problem, path: Path) -> str:
    """A backend's or scheduler's name as its registry knows it (an earlier name read as the new one, with a note);
    the default where it names none (the problem said)."""
    default = {"search.algorithm": "grid", "scheduler.type": "none"}[key]
    if not isinstance(name, str) or registry.canonical(name) not in registry.registered():
        problem(key, f"must be one of {', '.join(registry.registered())}, got {name!r}")
        return default
    if registry.canonical(name) != name:
        log.warning("%s: %s: %s is now called %s; read as %s (write %s to silence this note)", path, key, name,
                    registry.canonical(name), registry.canonical(name), registry.canonical(name))
    return registry.canonical(name)
