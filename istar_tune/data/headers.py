"""A header read as data, found wherever it stands: a row that holds the fields' own names (two exports
concatenated, the header again mid-file, a byte-order mark or quotes around it), and a file's own header under the
names ``column_names`` gives it. Refused in every format, naming the rows, before a header's label could become a
class named after the label field."""

from __future__ import annotations

import re
from collections import Counter

import datasets

from istar_tune.data.rows import rows_text
from istar_tune.tasks.labels import label_key
from istar_tune.tasks.task import SPLITS, Task
from istar_tune.tasks.values import label_text


def header_rows(task: Task, loaded: dict[str, datasets.Dataset], where: dict[str, str], problems: list[str]) -> None:
    """A header read as data is refused, naming its rows, in every format, before its label could become a class
    named after the label field: a row whose cells are the fields' own names under the label rule's normal form (a
    byte-order mark, quotes and case aside: two exports concatenated, the header again mid-file), or whose label is
    the label field's name beside a name in each input field; and, where ``column_names`` renames the fields, a first
    row that is the file's own header (:func:`_own_header`)."""
    named = [*task.text_fields, task.label_field]
    for split in SPLITS:
        data = loaded[split]
        if not set(named) <= set(data.column_names):
            continue
        values = [data[name] for name in named]
        found = [i for i, row in enumerate(zip(*values)) if _is_header(row, named)]
        if found:
            problems.append(f"{where[split]}: rows {rows_text(found)}: the row holds the fields' own names "
                            f"({', '.join(named)}): a header read as data (two exports concatenated, or column_names "
                            "given for a file that has a header): remove that row, or leave column_names out")
        elif task.column_names and _own_header(task, values):
            cells = ", ".join(str(v[0]).strip() for v in values)
            problems.append(f"{where[split]}: row 1 ({cells}) looks like the file's own header: column_names names "
                            "the fields of a file without one; for a file with a header, leave column_names out and "
                            "name its fields with text_fields and label_field (a first row that is data: declare the "
                            "classes with label_names)")


HEADER_CELL = re.compile(r"[^\W\d][\w.-]{0,63}")
"""A cell a header could hold: one name (a sentence of text is never one)."""


def _is_header(row: tuple, named: list[str]) -> bool:
    """The fields' own names, or (a header other than ``column_names``) the label field's name as the label with a
    name in every input field; cells compared under :func:`~istar_tune.tasks.labels.label_key`."""
    cells = [label_key(v) if isinstance(v, str) else None for v in row]
    if any(c is None for c in cells):
        return False
    if all(c == label_key(n) for c, n in zip(cells, named)):
        return True
    return cells[-1] == label_key(named[-1]) and all(HEADER_CELL.fullmatch(c) for c in cells[:-1])


def _own_header(task: Task, values: list[list]) -> bool:
    """Whether the first row of a file read with ``column_names`` is its own header under other names
    (``review,sentiment`` read as ``text,label``): every cell of it one name, and its label a value that occurs
    nowhere else in the column while every other label repeats. A declared class is never a header; a first row of
    one-word texts whose class occurs once is the case this cannot tell from a header (declare the classes)."""
    first = [v[0] if v else None for v in values]
    labels = [label_text(v) for v in values[-1]]
    if len(labels) < 3 or not all(isinstance(c, str) and HEADER_CELL.fullmatch(label_key(c)) for c in first):
        return False
    if labels[0] in {*task.label_names, *task.label_values}:
        return False
    counts = Counter(labels)
    return counts[labels[0]] == 1 and all(n > 1 for label, n in counts.items() if label != labels[0])
