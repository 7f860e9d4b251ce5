"""How a refusal names what it found: a file's rows (1-based, the first few and a count of the rest) and the kinds of
values a field holds, in words."""

from __future__ import annotations

MAX_ROWS_SHOWN = 5
"""Bad rows listed per split and problem (then a count of the rest)."""


def rows_text(indices: list[int]) -> str:
    """1-based row numbers, the first few and a count of the rest."""
    shown = ", ".join(str(i + 1) for i in indices[:MAX_ROWS_SHOWN])
    more = f" and {len(indices) - MAX_ROWS_SHOWN} more" if len(indices) > MAX_ROWS_SHOWN else ""
    return shown + more


def value_kind(value) -> str:
    """A value's kind in words, as a refusal names it (numbers, lists, text, ...)."""
    if isinstance(value, bool):
        return "yes/no values"
    if isinstance(value, (int, float)):
        return "numbers"
    if isinstance(value, (list, tuple)):
        return "lists"
    if isinstance(value, dict):
        return "mappings (nested objects)"
    if isinstance(value, str):
        return "text"
    return type(value).__name__
