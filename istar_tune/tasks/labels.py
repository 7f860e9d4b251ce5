"""One rule for every label of every format: a class is named by its name in ``label_names``, or by its index where
the names are words (``label_names: [negative, positive]`` and labels 0/1); where the names are numbers a label is
only ever a name (classes 0 and 2: a label 1 is refused, never read as the index of class 2); a score is a finite
number (not a boolean); the class names of a definition without ``label_names`` are the training split's distinct
values, sorted (numerically when they are all numbers)."""

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
        if isinstance(raw, bool):
            raise DataError(f"{where}: score {raw!r} is a yes/no value, not a number: a regression task's labels are "
                            "numbers (true/false labels are classes: problem_type: classification)")
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
    by_index = not any(is_number(name) for name in task.label_names)
    if by_index and text.isdigit() and int(text) < len(task.label_names):
        return int(text)
    indices = f" (or 0..{len(task.label_names) - 1})" if by_index else ""
    raise DataError(f"{where}: label {text!r} is not one of {', '.join(task.label_names)}{indices}")


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def mixed_labels(names: Iterable[str]) -> str:
    """What is wrong with a training split's class names, or "": numbers and words mixed (``0``, ``1``, ``neg``,
    ``pos`` would be four classes)."""
    numbers = [n for n in names if is_number(n)]
    words = [n for n in names if not is_number(n)]
    if numbers and words:
        return (f"its labels mix numbers ({', '.join(numbers[:3])}) and words ({', '.join(words[:3])}), which would "
                "be separate classes: write each class one way, or map them with label_names: [...] (a label that is "
                "a number in 0..N-1 then names the class at that index)")
    return ""


def distinct_labels(values: Iterable[Any]) -> tuple[str, ...]:
    """The class names of a training split: its distinct label values, sorted (as numbers when all are numbers)."""
    names = {label_text(v) for v in values if v is not None}
    if names and all(is_number(n) for n in names):
        return tuple(sorted(names, key=float))
    return tuple(sorted(names))
