"""Stanford sentiment trees (``format: ptb``, SST-5's files): one labelled tree a line; the root's label is the
sentence's, the leaves its words."""

from __future__ import annotations

import re
from pathlib import Path

from istar_tune.data.format import Format
from istar_tune.data.text_files import read_text
from istar_tune.errors import DataError
from istar_tune.tasks.task import Task

_PTB_ROOT = re.compile(r"^\((\d)\s")
_PTB_LEAF = re.compile(r"\(\d ([^()\s]+)\)")


def parse_ptb(task: Task, path: Path) -> dict[str, list]:
    """Stanford sentiment treebank lines: the root's label is the sentence label, the leaves its words."""
    sentences, labels = [], []
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        root, leaves = _PTB_ROOT.match(line), _PTB_LEAF.findall(line)
        if root is None or not leaves or line.count("(") != line.count(")"):
            raise DataError(f"{path}:{number}: not a labelled PTB tree such as '(3 (2 It) (4 works))'")
        labels.append(root.group(1))
        sentences.append(" ".join(leaves))
    if not labels:
        raise DataError(f"{path}: no trees")
    return {task.text_fields[0]: sentences, "label": labels}


PTB = Format(name="ptb", read=parse_ptb, describes="Stanford sentiment trees, one labelled tree a line")
