"""Tasks: what a fine-tuning task is (``task``), its definition as YAML (``definition``) and back (``mapping``), how
a definition lays its data out (``layout``: files, format, separator, encoding, a hub data set, the GLUE layout),
its labels (``labels``: one rule for every format; ``values``: a label value's text and canonical number), where the
shipped tasks' files come from (``data_folder``) and the tasks a process knows (``registry``: the shipped paper tasks
by name, ``paper/*.yaml``; one's own travel as objects). No module outside this package names a task.

The names below load with the module that holds them, when first asked for: a module of this package (``task``, the
label rule) is imported without the definitions, so :mod:`istar_tune.data`'s formats can read ``Task`` while the
definitions look formats up in their registry.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "load_task_file": "definition", "task_from_mapping": "definition",
    "definition_mapping": "mapping", "facts": "mapping", "task_from_facts": "mapping",
    "TASKS": "registry", "get_task": "registry", "is_shipped": "registry", "task_names": "registry",
    "task_of": "registry",
    "CLASSIFICATION": "task", "DEFAULT_METRIC": "task", "EXTRACTIVE_QA": "task", "METRICS": "task",
    "PROBLEM_TYPES": "task", "REGRESSION": "task", "SPLITS": "task", "Task": "task",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
