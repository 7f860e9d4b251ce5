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
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A number as a file writes one: ASCII digits, an optional sign, a decimal point, an exponent. Python's ``float``
also reads Arabic-Indic digits, full-width digits and ``1_000``; the label rule does not (they are refused, never
silently a number)."""


def canonical_number(value: Any) -> str | None:
    """A finite number as one class name (``1`` for 1, 1.0, '01' and '1e0'; ``0.5`` for 0.5; an integer written as
    one, exactly: ``9007199254740993`` stays itself), or ``None`` for text that is not a finite number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = str(value).strip()
    if INTEGER.fullmatch(text):
        return str(int(text))
    if not NUMBER.fullmatch(text):
        return None
    number = float(text)
    if not math.isfinite(number):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


MAX_EXCERPT = 40
"""The most characters of one value a refusal quotes (a cell's text can run to a million)."""


def excerpt(value: Any) -> str:
    """A value as a refusal quotes it: its ``repr``, or the first :data:`MAX_EXCERPT` characters' and its length."""
    if not isinstance(value, str):
        shown = repr(value)
        return shown if len(shown) <= MAX_EXCERPT else excerpt(label_text(value))
    text = value
    if len(text) <= MAX_EXCERPT:
        return repr(text)
    return f"{text[:MAX_EXCERPT]!r}… ({len(text):,} characters)"


def names_text(names, shown: int = 8) -> str:
    """Class names as a refusal lists them: the first few, each an excerpt where long, and a count of the rest."""
    names = list(names)
    listed = ", ".join(n if len(n) <= MAX_EXCERPT else excerpt(n) for n in names[:shown])
    return listed + (f" and {len(names) - shown:,} more" if len(names) > shown else "")
