"""Tasks: what a fine-tuning task is (``task``), its definition as YAML (``definition``) and back (``mapping``),
its labels (``labels``) and the tasks a process knows (``registry``: the shipped paper tasks by name; one's own
travel as objects). No module outside this package names a task.
"""

from istar_tune.tasks.definition import load_task_file, task_from_mapping
from istar_tune.tasks.mapping import definition_mapping, facts, task_from_facts
from istar_tune.tasks.registry import (
    TASKS,
    get_task,
    is_shipped,
    task_names,
    task_of,
)
from istar_tune.tasks.task import (
    CLASSIFICATION,
    DEFAULT_METRIC,
    EXTRACTIVE_QA,
    METRICS,
    PROBLEM_TYPES,
    REGRESSION,
    SPLITS,
    Task,
)

__all__ = [
    "CLASSIFICATION", "DEFAULT_METRIC", "EXTRACTIVE_QA", "METRICS", "PROBLEM_TYPES", "REGRESSION", "SPLITS", "TASKS",
    "Task", "definition_mapping", "facts", "get_task", "is_shipped", "load_task_file", "task_from_facts",
    "task_from_mapping", "task_names", "task_of",
]
