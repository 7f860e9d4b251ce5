"""The paper's files as the GLUE layout ships them, parsed by hand where ``datasets`` cannot read them as they are:
GLUE TSVs with stray ``"`` (quoting off), MRPC's byte-order mark, CoLA without a header, Stanford sentiment trees and
SQuAD v1.1's nested JSON. Every malformed row is reported with its file and line number. Rows come out as columns
of the task's fields and ``label`` as the file writes it: every check of the fields and labels is the one every format
takes (:mod:`istar_tune.training.reading`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from istar_tune.errors import DataError
from istar_tune.tasks import Task


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A data file's text; a file that is not UTF-8 is reported with its line and the offending byte."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); "
                        "save the file as UTF-8") from None


def parse_tsv(task: Task, path: Path) -> dict[str, list]:
    """Read one GLUE TSV into columns ``task.text_fields + ('label',)``."""
    lines = read_text(path, "utf-8-sig").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    layout = task.glue
    start = 1 if layout.header else 0
    if layout.header:
        if not lines:
            raise DataError(f"{path}: the file is empty; expected a header row")
        header = lines[0].rstrip("\r").split("\t")
        missing = [c for c in layout.columns.values() if isinstance(c, str) and c not in header]
        if missing:
            raise DataError(f"{path}: header lacks column(s) {', '.join(missing)}; found {', '.join(header)}")
        index = {name: header.index(col) for name, col in layout.columns.items()}
    else:
        index = dict(layout.columns)
    columns: dict[str, list] = {name: [] for name in (*task.text_fields, "label")}
    for number, line in enumerate(lines[start:], start=start + 1):
        fields = line.rstrip("\r").split("\t")
        where = f"{path}:{number}"
        if len(fields) != layout.num_columns:
            raise DataError(f"{where}: expected {layout.num_columns} tab-separated columns, found {len(fields)}")
        for name in task.text_fields:
            columns[name].append(fields[index[name]])
        columns["label"].append(fields[index["label"]])
    if not columns["label"]:
        raise DataError(f"{path}: no data rows")
    return columns


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


def parse_squad(task: Task, path: Path) -> dict[str, list]:
    """SQuAD JSON flattened to one row per question with ``answers = {text: [...], answer_start: [...]}`` (the QA
    checks of every format follow: answers in their context, ids unique, no nulls)."""
    try:
        try:
            articles = json.loads(read_text(path))["data"]
        except RecursionError:
            raise DataError(f"{path}: JSON nested too deep to be a SQuAD file") from None
        rows: dict[str, list] = {"id": [], "title": [], "context": [], "question": [], "answers": []}
        for article in articles:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    rows["id"].append(qa["id"])
                    rows["title"].append(article.get("title", ""))
                    rows["context"].append(paragraph["context"])
                    rows["question"].append(qa["question"])
                    rows["answers"].append({"text": [a["text"] for a in qa["answers"]],
                                            "answer_start": [a["answer_start"] for a in qa["answers"]]})
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"{path}: not a SQuAD file ({type(err).__name__}: {err})") from None
    if not rows["id"]:
        raise DataError(f"{path}: no questions")
    return rows


PARSERS = {"glue": parse_tsv, "ptb": parse_ptb, "squad": parse_squad}
