"""One rule for every label of every format: a class is named by its name in ``label_names`` or by its index; a
score is a finite number; the class names of a definition without ``label_names`` are the training split's
distinct values, sorted (numerically when they are all numbers)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from istar_tune.errors import DataError
from istar_tune.tasks.definition import label_text
from istar_tune.tasks.task import REGRESSION, Task


def label_value(task: Task, raw: Any, where: str) -> int | float:
    """The label id (classification) or score (regression) of a raw value; a :class:`DataError` naming ``where``."""
    if task.problem_type == REGRESSION:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise DataError(
                f"{where}: score {raw!r} is not a number (a regression task's labels are numbers)") from None
        if not math.isfinite(value):
            raise DataError(f"{where}: score {raw!r} is not a finite number")
        if task.score_range is not None and not task.score_range[0] <= value <= task.score_range[1]:
            low, high = task.score_range
            raise DataError(f"{where}: score {raw!r} is outside the task's scale {low:g} to {high:g} (score_range)")
        return value
    text = label_text(raw)
    if text in task.label_names:
        return task.label_names.index(text)
    if text.isdigit() and int(text) < len(task.label_names):
        return int(text)
    raise DataError(f"{where}: label {text!r} is not one of {', '.join(task.label_names)} "
                    f"(or 0..{len(task.label_names) - 1})")


def distinct_labels(values: Iterable[Any]) -> tuple[str, ...]:
    """The class names of a training split: its distinct label values, sorted (as numbers when all are numbers)."""
    names = {label_text(v) for v in values if v is not None}

    def as_number(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:
            return None

    if names and all(as_number(n) is not None for n in names):
        return tuple(sorted(names, key=lambda n: as_number(n)))
    return tuple(sorted(names))
