"""SQuAD's nested JSON (``format: squad``: data → paragraphs → qas), one row a question; a ``.json`` file with that
nesting is read as SQuAD, not as a table of rows."""

from __future__ import annotations

import json
from pathlib import Path

from istar_tune.data.format import Format
from istar_tune.data.text_files import read_text
from istar_tune.errors import DataError
from istar_tune.tasks.task import EXTRACTIVE_QA, Task

SNIFF_BYTES = 1 << 16
"""How much of a .json file is read to tell SQuAD's nested layout from a table of rows."""


def looks_like_squad(path: Path) -> bool:
    """Whether a .json file is SQuAD's nested layout: one object whose ``data`` holds articles with ``paragraphs``."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False
    return head.startswith(b"{") and b'"data"' in head and b'"paragraphs"' in head


def parse_squad(task: Task, path: Path) -> dict[str, list]:
    """SQuAD JSON flattened to one row per question with ``answers = {text: [...], answer_start: [...]}`` (the QA
    checks of every format follow: answers in their context, ids unique, no nulls)."""
    try:
        try:
            articles = json.loads(read_text(path, task.encoding).removeprefix("\ufeff"))["data"]
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


SQUAD = Format(name="squad", read=parse_squad, extensions=(".json",), claims=looks_like_squad,
               problem_type=EXTRACTIVE_QA, describes="SQuAD's nested JSON (data → paragraphs → qas), v1.1 or v2")
