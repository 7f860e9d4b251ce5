"""Which tasks a process knows: the shipped ones (``tasks/paper/*.yaml``) and the definitions registered since (a
search space's, a trial's, the ones read back from MLflow). Everything that names a task asks :func:`get_task`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from istar_tune.errors import ConfigError
from istar_tune.tasks.definition import (
    definition_mapping,
    load_task_file,
    looks_like_definition_path,
    task_from_facts,
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
_registered: dict[str, Task] = {}


def get_task(name: str) -> Task:
    """The task called ``name``: a shipped task (case-insensitive; ``sst2``, ``SST-2`` and ``sst-2`` are the same)
    or a registered definition."""
    text = str(name).strip()
    key = SHIPPED_ALIASES.get(text.lower())
    if key is not None:
        return TASKS[key]
    if text in _registered:
        return _registered[text]
    known = [*TASKS, *_registered]
    raise ConfigError(f"unknown task {name!r}: choose one of {', '.join(known)}, or give a task definition file "
                      "(a .yaml path; see docs/tasks.md)")


def task_names() -> list[str]:
    return [*TASKS, *_registered]


def is_shipped(name: str) -> bool:
    return str(name).strip().lower() in SHIPPED_ALIASES


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Make ``task`` known by its name. A second, different definition of the same name is refused unless
    ``replace`` (the same task resolved, or a trial's own copy)."""
    if task.shipped:
        return task
    if is_shipped(task.name):
        raise ConfigError(f"{task.source}: name: {task.name!r} is the name of a shipped task: give your task another "
                          "name")
    known = _registered.get(task.name)
    if known is not None and not replace and _identity(known) != _identity(task):
        raise ConfigError(f"two different task definitions are named {task.name!r} ({known.source} and "
                          f"{task.source}): rename one")
    if known is None or replace or (not known.resolved and task.resolved):
        _registered[task.name] = task
    return _registered[task.name]


def _identity(task: Task) -> dict[str, Any]:
    """What makes two definitions the same task (what resolution adds aside)."""
    mapping = definition_mapping(task)
    for key in ("label_names", "examples", "checksums", "text_fields"):
        mapping.pop(key, None)
    if task.infer_problem_type or task.inferred:  # the data decides these (or decided them)
        mapping.pop("problem_type")
        mapping.pop("metric")
    return mapping


def remember_facts(values: Mapping[str, str], source: str) -> Task:
    """A task as a reader of MLflow finds it (:func:`istar_tune.tasks.definition.facts`): the registered task when it
    agrees, else these facts (an experiment's own word on its task wins over an older definition of the name)."""
    name = values["name"]
    if is_shipped(name):
        return get_task(name)
    known = _registered.get(name)
    if known is not None and all(getattr(known, k) == values.get(k) for k in ("display_name", "problem_type",
                                                                                "metric")):
        return known
    _registered[name] = task_from_facts(values, source)
    return _registered[name]


def task_of(reference: str | Mapping[str, Any], base_dir: str | Path | None = None, source: str = "tasks",
            known: Mapping[str, Task] | None = None) -> Task:
    """The task a reference names, registering nothing: a shipped task's name, one of ``known`` (tasks by name, e.g.
    a search space's own), a definition file (relative to ``base_dir``), or a definition mapping (inline in a search
    space or a config)."""
    reserved = frozenset(SHIPPED_ALIASES)
    if isinstance(reference, Mapping):
        return task_from_mapping(reference, base_dir, source=source, reserved=reserved)
    text = str(reference).strip()
    if known and text in known:
        return known[text]
    if not looks_like_definition_path(text) or is_shipped(text) or text in _registered:
        return get_task(text)
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return load_task_file(path, reserved=reserved)


def task_reference(reference: str | Mapping[str, Any], base_dir: str | Path | None = None,
                   source: str = "tasks") -> Task:
    """:func:`task_of`, registered: for the commands that name a task afterwards by its name alone (``train``,
    ``analyze``)."""
    return register_task(task_of(reference, base_dir, source))


def forget_registered() -> None:
    """Forget every registered definition (tests)."""
    _registered.clear()
