"""A label value as the label rule reads it, in one place for the definition (``label_names``, ``drop_labels``) and
the data (:mod:`istar_tune.tasks.labels`): its text, one spelling per value, and its canonical number."""

from __future__ import annotations

import math
import re
from typing import Any


def label_text(value: Any) -> str:
    """A label value as text, one spelling per value: ``1``, ``1.0`` and ``"1"`` are the same class."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


INTEGER = re.compile(r"[+-]?[0-9]+")
"""An integer written as one: read exactly, never through a float (codes past 2**53 stay apart)."""


def canonical_number(value: Any) -> str | None:
    """A finite number as one class name (``1`` for 1, 1.0, '01' and '1e0'; ``0.5`` for 0.5; an integer written as
    one, exactly: ``9007199254740993`` stays itself), or ``None`` for text that is not a finite number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = str(value).strip()
    if INTEGER.fullmatch(text):
        return str(int(text))
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return str(int(number)) if number.is_integer() else repr(number)
