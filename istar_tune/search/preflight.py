"""Checks on the driver before a search starts anything: every problem at once, one line each.

A search that would fail in every trial (data missing or malformed, a model that cannot be resolved, a
``max_length`` past the model's positions, a tracking store that cannot be reached, a storage path that is a file,
a trial that no node of the cluster can hold) is refused here, before any trial, results folder or MLflow
experiment exists. Data files are parsed with the parsers the trials use; models are resolved by their config
only (no weights).
"""

from __future__ import annotations

import time
from pathlib import Path

from istar_tune.errors import ConfigError, IstarTuneError
from istar_tune.models import check_max_length, max_positions
from istar_tune.tasks import get_task
from istar_tune.tracking.storage import is_remote, unwritable
from istar_tune.tracking.store import check_reachable, check_writable


def check_tracking(tracking_uri: str) -> list[str]:
    """The tracking URI has a known scheme, its server or database answers quickly, and the store can be written
    (:func:`istar_tune.tracking.store.check_writable`)."""
    try:
        check_reachable(tracking_uri)
        check_writable(tracking_uri)
    except IstarTuneError as err:
        return [str(err)]
    return []


def check_storage(storage: str) -> list[str]:
    if is_remote(storage):
        return []
    problem = f"{storage} is a file" if Path(storage).is_file() else unwritable(storage)
    return [f"storage path {storage!r}: {problem}; give a folder for the results"] if problem else []


def check_data(tasks: list[str], data_dir: str | None, hub_timeout_s: float = 5.0) -> list[str]:
    """Every task's split files exist and parse (as the trials will read them); without a data folder, the Hugging
    Face hub answers within ``hub_timeout_s`` (else every trial would fail after its retries)."""
    from istar_tune.training.data import hub_reachable, parse_file, resolve_data_dir, task_files

    problems = []
    try:
        root = resolve_data_dir(data_dir)
    except IstarTuneError as err:
        return [str(err)]
    if root is None:
        if hub_reachable(hub_timeout_s):
            return []  # the trials download the tasks
        return [f"no data folder (--data-dir, the space's data_dir or $GLUE_DIR) and the Hugging Face hub does not "
                f"answer within {hub_timeout_s:g} s (or HF_HUB_OFFLINE is set): give --data-dir DIR in the GLUE "
                "layout (e.g. ../shared/data/glue)"]
    for name in tasks:
        task = get_task(name)
        try:
            for path in task_files(task, root).values():
                parse_file(task, path)
        except IstarTuneError as err:
            problems.append(str(err))
    return problems


def check_models(models: list[str], max_length: int) -> list[str]:
    problems = []
    for model in models:
        try:
            check_max_length(max_length, max_positions(model), model)
        except IstarTuneError as err:
            problems.append(str(err))
    return problems


def check_resources(cpu: float, gpu: float, nodes: list[dict]) -> list[str]:
    """Some alive node of the cluster can hold one trial's request."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", n.get("alive", True))]
    if any(r.get("CPU", 0) >= cpu and r.get("GPU", 0) >= gpu for r in alive):
        return []
    total_gpu = sum(r.get("GPU", 0) for r in alive)
    largest = max(alive, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    return [f"a trial asks for {gpu:g} GPU(s) and {cpu:g} CPU(s), but no node of the cluster has that: the cluster "
            f"has {total_gpu:g} GPU(s) in {len(alive)} node(s), the largest node {largest.get('GPU', 0):g} GPU(s) "
            f"and {largest.get('CPU', 0):g} CPU(s); lower resources in the search space or add nodes"]


def run_checks(checks: list[tuple[str, callable]]) -> float:
    """Run ``checks`` (name, function returning problems); raise one :class:`ConfigError` listing them all.
    Returns the seconds they took."""
    began = time.monotonic()
    problems = []
    for _, check in checks:
        problems += check()
    if problems:
        raise ConfigError(problems)
    return time.monotonic() - began
