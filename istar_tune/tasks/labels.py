"""One rule for every label of every format (csv, tsv, json, parquet, the hub, the GLUE layout's files):

* **Canonical values.** Where every label of a split's column parses as a finite number, numbers are the labels:
  ``'01'``, ``'1'``, ``'1.0'``, ``'1e0'`` and ``1`` are one class, ``1``; an integer written as one is read exactly
  (codes past 2**53 stay apart). Otherwise a label is its text, stripped.
* **Not labels.** ``None``, NaN, ``''``, ``'nan'`` and placeholders (``-``, ``?``, ``n/a``, ``null``, ``none``) are
  refused, naming them and their rows, unless the definition's ``drop_labels`` lists them (the rows are then dropped
  and counted). Lists and mappings are refused: multi-label classification is not supported.
* **Classes.** ``label_names`` a list: a label is a class's name, or (names that are words) its 0-based index;
  integer labels 1..N against a list of N names are refused as 1-based (give the mapping ``{1: World, ...}``).
  ``label_names`` a mapping: each listed value names its class, nothing else. Without ``label_names`` the classes are
  the training split's distinct labels, sorted (numerically when they are numbers): two spellings of one name under
  :func:`label_key` (NFKC, format characters removed, quotes stripped, case folded) are refused naming the code points
  that differ, numbers mixed with words are refused, and a split whose labels are numbers where the training split's
  are words is refused (no index is guessed). One training class is refused whatever ``label_names`` says.
* **Scores** (regression) are finite numbers, written as numbers or as numeric strings; yes/no values are refused.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from istar_tune.errors import DataError
from istar_tune.tasks.task import REGRESSION, Task
from istar_tune.tasks.values import canonical_number, label_text

PLACEHOLDERS = ("", "nan", "none", "null", "-", "?", "n/a")
"""Label texts that stand for "no label" (compared case-insensitively): refused unless ``drop_labels`` names them."""


def is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except (TypeError, ValueError):
        return False


def number_text(value: Any) -> str:
    """A number as one class name: ``1`` for 1, 1.0, '01' and '1e0'; ``0.5`` for 0.5; an integer written as one read
    exactly (:func:`~istar_tune.tasks.definition.canonical_number`)."""
    text = canonical_number(value)
    if text is None:
        raise ValueError(f"{value!r} is not a finite number")
    return text


def number_key(text: str) -> Fraction:
    """A canonical number's exact value, for sorting classes (a float would tie codes past 2**53)."""
    return Fraction(text)


@dataclass
class LabelColumn:
    """A split's label column under the rule: each row's canonical text (``None``: not a label), and what is wrong."""

    texts: list[str | None]
    numeric: bool
    """Every label of the column is a number (the texts are then canonical numbers)."""
    structured: list[int] = field(default_factory=list)
    """Rows whose label is a list or a mapping."""
    missing: dict[str, list[int]] = field(default_factory=dict)
    """Placeholder text (as written) → its rows."""


def read_column(values: Sequence[Any], drop: Iterable[str] = (), declared: Iterable[str] = ()) -> LabelColumn:
    """The canonical labels of a column; rows whose label is in ``drop`` are ``None`` and not reported; a placeholder
    the definition declares as a class (``label_names: [none, some]``) is that class."""
    dropped = {d.strip().lower() for d in drop}
    classes = {str(d).strip().lower() for d in declared}
    texts: list[str | None] = []
    structured, missing = [], {}
    for row, value in enumerate(values):
        if isinstance(value, (list, tuple, dict, Mapping)):
            structured.append(row)
            texts.append(None)
            continue
        if value is None or (isinstance(value, float) and math.isnan(value)):
            text = "" if value is None else "nan"
        else:
            text = label_text(value)
        if text.lower() in dropped:
            texts.append(None)
        elif text.lower() in PLACEHOLDERS and text.lower() not in classes:
            missing.setdefault(text, []).append(row)  # an empty cell (None) as ''

            texts.append(None)
        else:
            texts.append(text)
    present = [t for t in texts if t is not None]
    numeric = bool(present) and all(is_number(t) for t in present) and not any(
        isinstance(v, bool) for v in values)
    if numeric:
        texts = [None if t is None else number_text(t) for t in texts]
    return LabelColumn(texts, numeric, structured, missing)


def column_problems(column: LabelColumn, where: str, rows) -> list[str]:
    """What a column's rule refuses, one line each: structured labels, placeholders."""
    problems = []
    if column.structured:
        problems.append(f"{where}: rows {rows(column.structured)}: the label is a list or a mapping: multi-label "
                        "classification is not supported (one label per row)")
    if column.missing:
        named = ", ".join(repr(t) for t in column.missing)
        all_rows = sorted(r for found in column.missing.values() for r in found)
        verb = "is" if len(column.missing) == 1 else "are"
        if any(t is not None for t in column.texts):
            problems.append(f"{where}: rows {rows(all_rows)}: {named} {verb} not a label: fix those rows, or drop them "
                            f"with drop_labels: [{named}] in the task's definition")
        else:  # dropping them would leave nothing: that advice is not given
            problems.append(f"{where}: no row has a label (every one is {named}): is label_field the label column, "
                            "and are the file's fields separated as its format says?")
    return problems


def distinct_labels(texts: Iterable[str | None], numeric: bool) -> tuple[str, ...]:
    """The class names of a training split: its distinct canonical labels, sorted (as numbers when numeric)."""
    names = {t for t in texts if t is not None}
    return tuple(sorted(names, key=number_key)) if numeric else tuple(sorted(names))


QUOTES = "\"'"
"""Quotes a label may arrive wrapped in (a label JSON-encoded twice: ``"\\"positive\\""``)."""


def label_key(name: str) -> str:
    """The one normal form class names are compared under: Unicode NFKC, format characters (category Cf: zero-width
    spaces, byte-order marks) removed, surrounding quotes and whitespace stripped, case folded."""
    text = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf").strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in QUOTES:
        text = text[1:-1].strip()
    return text.casefold()


def spelling_variants(names: Iterable[str], declared: Iterable[str] = ()) -> list[tuple[str, ...]]:
    """Class names that are one name under :func:`label_key` but written differently (``Positive`` and ``positive``;
    ``positive`` and ``positive`` with a zero-width space; ``é`` as one code point or two), unless all of them are
    declared."""
    by_key: dict[str, list[str]] = {}
    for name in names:
        by_key.setdefault(label_key(name), []).append(name)
    known = set(declared)
    return [tuple(sorted(group)) for group in by_key.values() if len(group) > 1 and not set(group) <= known]


def how_they_differ(variants: Sequence[str]) -> str:
    """What sets spellings of one name apart, in words: their case, or the code points each holds beyond printable
    ASCII (``'positive\u200b' holds U+200B ZERO WIDTH SPACE``)."""
    if len({v.lower() for v in variants}) == 1:
        return "differ only in case"  # not casefold: it also maps a ligature (U+FB01) to its letters
    held = []
    for variant in variants:
        unusual = [c for c in dict.fromkeys(variant) if not (" " <= c <= "~")]
        points = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in unusual)
        held.append(f"{variant!r} holds {points or 'printable ASCII only'}")
    return ("are one name once normalised (NFKC, format characters removed, quotes stripped, case folded) but "
            "written differently: " + "; ".join(held))


DECORATED_NUMBERS = (
    (re.compile(r"[+-]?[0-9]+,[0-9]+"), "a decimal comma (or a thousands separator)"),
    (re.compile(r"[+-]?[0-9]+(?:[.,][0-9]+)?\s*%"), "a percent sign"),
    (re.compile(r"[+-]?[0-9]+(?:[.,][0-9]+)?\s*[^\W\d_][\w ./-]*"), "a unit"),
)
"""Labels that are a number once a decimal comma, a percent sign or a unit is read (``3,5``, ``70%``, ``3.5 stars``),
each with its words."""


def written_number(text: str) -> str:
    """How ``text`` writes a number that is not bare (:data:`DECORATED_NUMBERS`), or "" where it does not."""
    return next((how for pattern, how in DECORATED_NUMBERS if pattern.fullmatch(text.strip())), "")


def decorated_labels(texts: Iterable[str | None]) -> str:
    """What is wrong with a training split whose every label is a number written with a decimal comma, a percent
    sign or a unit, or "": read as text they would be classes, one per spelling (a 1-to-5 score in halves would train
    a 9-class classifier)."""
    present = sorted({t for t in texts if t is not None})
    how = {written_number(t) or ("bare" if is_number(t) else "") for t in present}
    if not present or "" in how or how == {"bare"}:
        return ""
    how.discard("bare")
    shown = [t for t in present if written_number(t)][:3]
    return (f"its labels are numbers written with {' and '.join(sorted(how))} ({', '.join(map(repr, shown))}), "
            f"which would train as {len(present)} classes: if they are scores, write them as bare numbers (3.5, not "
            "'3,5', '3.5 stars' or '70%') and say problem_type: regression; if they are classes, declare them with "
            "label_names: [...]")


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


def one_based(texts: Iterable[str | None], numeric: bool, names: Sequence[str]) -> bool:
    """Integer labels 1..N (N reached, no 0) against a list of N class names: they look 1-based."""
    if not numeric or any(is_number(n) for n in names):
        return False
    values = {float(t) for t in texts if t is not None}
    whole = bool(values) and all(v.is_integer() for v in values)
    return whole and min(values) >= 1 and max(values) == len(names)


def label_value(task: Task, raw: Any, where: str) -> int | float:
    """The label id (classification) or score (regression) of one value; a :class:`DataError` naming ``where``.
    ``raw`` is a canonical label text (:func:`read_column`) or, for a score, any value."""
    if task.problem_type == REGRESSION:
        if isinstance(raw, bool):
            raise DataError(f"{where}: score {raw!r} is a yes/no value, not a number: a regression task's labels are "
                            "numbers (true/false labels are classes: problem_type: classification)")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            how = written_number(str(raw))
            written = f"; it is written with {how}: write bare numbers (3.5, not '3,5')" if how else ""
            raise DataError(
                f"{where}: score {raw!r} is not a number (a regression task's labels are numbers){written}") from None
        if not math.isfinite(value):
            raise DataError(f"{where}: score {raw!r} is not a finite number")
        if task.score_range is not None and not task.score_range[0] <= value <= task.score_range[1]:
            low, high = task.score_range
            raise DataError(f"{where}: score {raw!r} is outside the task's scale {low:g} to {high:g} (score_range)")
        return value
    text = label_text(raw)
    if task.label_values:  # a mapping: its values alone name the classes
        if is_number(text) and all(is_number(v) for v in task.label_values):
            text = number_text(text)
        if text in task.label_values:
            return task.label_values.index(text)
        raise DataError(f"{where}: label {text!r} is not one of {', '.join(task.label_values)} (label_names)")
    if text in task.label_names:
        return task.label_names.index(text)
    by_index = task.indexed_labels and not any(is_number(name) for name in task.label_names)
    if by_index and is_number(text) and float(text).is_integer() and 0 <= float(text) < len(task.label_names):
        return int(float(text))
    indices = f" (or 0..{len(task.label_names) - 1})" if by_index else ""
    raise DataError(f"{where}: label {text!r} is not one of {', '.join(task.label_names)}{indices}")
