"""The tasks a process knows by name: the shipped ones (``tasks/paper/*.yaml``), and nothing else. A task of one's own
travels as an object (a search space's, inside each trial's configuration, in a run's MLflow tags) and is looked up
among the tasks its caller holds (``known``); nothing registers one, so no order of calls decides what a name means.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from istar_tune.errors import ConfigError
from istar_tune.tasks.definition import (
    load_task_file,
    looks_like_definition_path,
    task_from_mapping,
)
from istar_tune.tasks.task import Task
from istar_tune.yamlfile import load_yaml

PAPER_FOLDER = Path(__file__).resolve().parent / "paper"
PAPER_ORDER = ("sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad")
"""The order of the I-STAR paper's tables."""


def _shipped() -> dict[str, Task]:
    found = {}
    for path in sorted(PAPER_FOLDER.glob("*.yaml")):
        task = task_from_mapping(load_yaml(path), None, source="shipped", shipped=True)
        found[task.name] = task
    order = {name: index for index, name in enumerate(PAPER_ORDER)}
    return dict(sorted(found.items(), key=lambda item: order.get(item[0], len(order))))


TASKS: dict[str, Task] = _shipped()
"""The shipped tasks (the I-STAR paper's nine), by name, in the paper's order."""
SHIPPED_ALIASES = {alias: task.name for task in TASKS.values()
                   for alias in (task.name, task.display_name.lower(), task.display_name.lower().replace("-", ""))}


def get_task(name: str, known: Mapping[str, Task] | None = None) -> Task:
    """The task called ``name``: a shipped task (case-insensitive; ``sst2``, ``SST-2`` and ``sst-2`` are the same) or
    one of ``known`` (tasks by name: a search space's own, the tasks a search's runs describe)."""
    text = str(name).strip()
    key = SHIPPED_ALIASES.get(text.lower())
    if key is not None:
        return TASKS[key]
    if known and text in known:
        return known[text]
    choices = [*TASKS, *(known or {})]
    raise ConfigError(f"unknown task {name!r}: choose one of {', '.join(choices)}, or give a task definition file "
                      "(a .yaml path; see docs/tasks.md)")


def task_names() -> list[str]:
    return list(TASKS)


def is_shipped(name: str) -> bool:
    return str(name).strip().lower() in SHIPPED_ALIASES


def task_of(reference: str | Mapping[str, Any], base_dir: str | Path | None = None, source: str = "tasks",
            known: Mapping[str, Task] | None = None) -> Task:
    """The task a reference names: a shipped task's name, one of ``known`` (tasks by name, e.g.
    a search space's own), a definition file (relative to ``base_dir``), or a definition mapping (inline in a search
    space or a config)."""
    reserved = frozenset(SHIPPED_ALIASES)
    if isinstance(reference, Mapping):
        return task_from_mapping(reference, base_dir, source=source, reserved=reserved)
    text = str(reference).strip()
    if (known and text in known) or not looks_like_definition_path(text) or is_shipped(text):
        return get_task(text, known)
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return load_task_file(path, reserved=reserved)
