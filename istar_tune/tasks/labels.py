"""One rule for every label of every format (csv, tsv, json, parquet, the hub, the GLUE layout's files):

* **Canonical values.** Where every label of a split's column is a finite number written in ASCII digits, numbers
  are the labels: ``'01'``, ``'1'``, ``'1.0'``, ``'1e0'`` and ``1`` are one class, ``1``; an integer written as one is
  read exactly (codes past 2**53 stay apart). Otherwise a label is its text, stripped.
* **What a class is** (:data:`CLASS_RULE`, docs/reference.md): classes are inferred only from integer codes and
  names; a label that reads as a quantity any other way is refused with both fixes (:func:`quantity`).
* **Not labels.** ``None``, NaN, ``''`` and the :data:`PLACEHOLDERS` (``-``, ``?``, ``n/a``, ``NA``, ``null``, ...)
  are refused, naming them and their rows, unless the definition's ``drop_labels`` lists them (the rows are then
  dropped and counted). Lists and mappings are refused: multi-label classification is not supported.
* **Classes.** ``label_names`` a list: a label is a class's name, or (names that are words) its 0-based index;
  integer labels 1..N against a list of N names are refused as 1-based (give the mapping ``{1: World, ...}``).
  ``label_names`` a mapping: each listed value names its class, nothing else. Without ``label_names`` the classes are
  the training split's distinct labels, sorted (numerically when they are numbers): two spellings of one name under
  :func:`label_key` are refused naming the code points that differ, numbers mixed with words are refused, and a split
  whose labels are numbers where the training split's are words is refused (no index is guessed). One training class
  is refused whatever ``label_names`` says.
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
from istar_tune.tasks.values import NUMBER, canonical_number, excerpt, label_text, names_text

PLACEHOLDERS = ("", "nan", "na", "<na>", "#n/a", "n/a", "none", "null", "nil", "-", "?")
"""Label texts that stand for "no label" (compared case-insensitively; R's and pandas' ``NA``, Excel's ``#N/A``):
refused unless ``drop_labels`` names them, or ``label_names`` declares one as a class."""


def is_number(text: str) -> bool:
    """A finite number written in ASCII digits (:data:`~istar_tune.tasks.values.NUMBER`)."""
    text = str(text).strip()
    return bool(NUMBER.fullmatch(text)) and math.isfinite(float(text))


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


def invisible(char: str) -> bool:
    """A code point that changes no letter a reader sees: a format character (category Cf: zero-width spaces,
    byte-order marks, bidi marks) or a variation selector (U+FE00-U+FE0F, U+E0100-U+E01EF: ``❤`` and ``❤️`` look
    alike). Skin-tone modifiers are visible and stay."""
    point = ord(char)
    return unicodedata.category(char) == "Cf" or 0xFE00 <= point <= 0xFE0F or 0xE0100 <= point <= 0xE01EF


def label_key(name: str) -> str:
    """The one normal form class names (and header cells) are compared under: Unicode NFKC, invisible code points
    (:func:`invisible`) removed anywhere, surrounding quotes and whitespace stripped, case folded."""
    text = "".join(c for c in unicodedata.normalize("NFKC", name) if not invisible(c)).strip()
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
        held.append(f"{excerpt(variant)} holds {points or 'printable ASCII only'}")
    return ("are one name once normalised (NFKC, format characters and variation selectors removed, quotes "
            "stripped, case folded) but "
            "written differently: " + "; ".join(held))


CLASS_RULE = """\
Without `label_names`, the classes are inferred from the training split's labels, and a label is inferred as a class
only when it is one of two things:

- **an integer code**: ASCII digits with an optional sign, read by value (`0`, `1`, `-1`, `007`; `1.0` and `1e0`
  where every label of the column is a number, as pandas writes integers beside an empty cell);
- **a name**: words, symbols or emoji with no digit (`positive`, `not entailment`, `❤`, `★★★`), or an identifier in
  which digits are joined to letters by nothing, an underscore or a hyphen (`LABEL_0`, `topic_12`, `C3`, `B-PER2`).

Any other label reads as a quantity and is never inferred as a class: a decimal point or comma (`3.5`, `12,50`), a
currency (`$12.50`, `12,50 €`), a unit or degree sign (`21.0°C`, `5 kg`), a star (`4★`), a percent (`70%`), a
fraction (`1/2`, `½`), a range (`1-5`), digits of another script (`٣`, `۳`), a typographic minus (`−3`), or a number
beside a word (`5 stars`, `level 3`). Such a column is refused in one line with both fixes: `problem_type: regression`
with each label written as a bare number (`12.50`, not `12,50 €`), or `label_names: [...]` to declare the classes.
Declared names are classes, whatever they hold.
"""
"""What a class is, in the words docs/reference.md states it (the reference's section is this text)."""

STARS = "★☆⭐✩✪✫✬✭✮✯✰"
DEGREES = "°℃℉"
PERCENTS = "%‰‱٪"
MINUSES = "−‒–—﹣－"
IDENTIFIER = re.compile(r"(?:[^\W\d]|[0-9]|-)+")
"""A token in which ASCII digits are joined to letters, ``_`` or ``-`` (``LABEL_0``, ``C3``)."""


def quantity(text: str) -> str:
    """How a label reads as a quantity under :data:`CLASS_RULE` (``"a currency sign '€'"``), or "" where it is a
    class: an integer code, or a name."""
    text = text.strip()
    if re.fullmatch(r"[+-]?[0-9]+", text) or not any(unicodedata.category(c).startswith("N") for c in text):
        return ""
    for char in text:
        category = unicodedata.category(char)
        if category == "Nd" and not "0" <= char <= "9":
            return f"digits of another script ({char!r}, U+{ord(char):04X} {unicodedata.name(char, 'a digit')})"
        if category in ("No", "Nl"):
            return f"a numeric character ({char!r}, U+{ord(char):04X} {unicodedata.name(char, 'a number')})"
    signs = (("Sc", "a currency sign"), (DEGREES, "a degree sign"), (STARS, "a star"), (PERCENTS, "a percent sign"))
    for chars, words in signs:
        found = next((c for c in text if (unicodedata.category(c) == chars if chars == "Sc" else c in chars)), None)
        if found:
            return f"{words} ({found!r})"
    patterns = ((r"[0-9]\s*,\s*[0-9]", "a decimal comma or a thousands separator"),
                (r"[0-9]\s*\.\s*[0-9]|(?<![\w])\.[0-9]|[0-9]\.(?!\w)", "a decimal point"),
                (r"[0-9]\s*[/⁄]\s*[0-9]", "a fraction"),
                (f"[{MINUSES}]\\s*[0-9]", "a typographic minus"),
                (r"[0-9]\s*(?:-|to|\.\.)\s*[0-9]", "a range"))
    for pattern, words in patterns:
        if re.search(pattern, text):
            return words
    if all(IDENTIFIER.fullmatch(token) and re.search(r"[^\W\d_]", token)
           for token in text.split() if any(c.isdigit() for c in token)):
        return ""
    return "a number beside a word (a unit or a count)"


def quantity_labels(names: Sequence[str], numeric: bool) -> str:
    """What is wrong with a training split's inferred class names that read as quantities (:func:`quantity`; a
    numeric column's numbers with a fractional part), or "": one line with both fixes."""
    if numeric:
        found = {n: "a decimal point" for n in names if not float(n).is_integer()}
    else:
        found = {n: how for n in sorted(names, key=is_number) if (how := quantity(n))}  # decorated ones first
    if not found:
        return ""
    shown = ", ".join(map(excerpt, list(found)[:3])) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    how = "; ".join(dict.fromkeys(found.values()))
    example = next(iter(found))
    number = re.search(r"[0-9]+(?:[.,][0-9]+)?", example)
    bare = number.group().replace(",", ".") if number and number.group() != example else "12.50"
    return (f"label{'s' if len(found) > 1 else ''} {shown} read{'' if len(found) > 1 else 's'} as a quantity "
            f"({how}), not a class: classes are inferred only from integer codes and names (docs/reference.md, "
            f"\"What a class is\"); if they are scores, say problem_type: regression and write each as a bare number "
            f"({bare}, not {excerpt(example)}); if they are classes, declare them with label_names: [...]")


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
            how = quantity(str(raw))
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
        raise DataError(f"{where}: label {text!r} is not one of {names_text(task.label_values)} (label_names)")
    if text in task.label_names:
        return task.label_names.index(text)
    by_index = task.indexed_labels and not any(is_number(name) for name in task.label_names)
    if by_index and is_number(text) and float(text).is_integer() and 0 <= float(text) < len(task.label_names):
        return int(float(text))
    indices = f" (or 0..{len(task.label_names) - 1})" if by_index else ""
    raise DataError(f"{where}: label {text!r} is not one of {names_text(task.label_names)}{indices}")
