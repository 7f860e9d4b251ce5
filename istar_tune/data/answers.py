"""An extractive-QA split's checks and shape: SQuAD's columns (``id``, ``question``, ``context``, ``answers = {text,
answer_start}``), each answer its context's text at its offset, ids of their own; a question without an answer is
unanswerable (SQuAD v2)."""

from __future__ import annotations

from collections import Counter

import datasets

from istar_tune.data.rows import MAX_ROWS_SHOWN, rows_text
from istar_tune.tasks.task import Task


def qa_split(task: Task, data: datasets.Dataset, where: str, problems: list[str]) -> datasets.Dataset:
    """A QA split as SQuAD's columns: ``id``, ``question``, ``context``, ``answers = {text, answer_start}``."""
    question, context = task.text_fields
    bad = [i for i, a in enumerate(data[task.label_field])
           if not isinstance(a, dict) or not isinstance(a.get("text"), list)
           or len(a.get("text", [])) != len(a.get("answer_start", []) or [])]
    if bad:
        problems.append(f"{where}: rows {rows_text(bad)}: {task.label_field} must be {{text: [...], answer_start: "
                        "[...]}} of the same length")
        return data
    given = data["id"] if "id" in data.column_names else list(range(len(data)))
    nulls = [row for row, value in enumerate(given) if value is None or str(value).strip() == ""]
    if nulls:
        problems.append(f"{where}: rows {rows_text(nulls)}: no id: each question needs its own id (answers are "
                        "scored per id)")
    ids = [str(i) for i in given]
    answers = check_answers(data[context], data[task.label_field], where, task.label_field, problems)
    counts = Counter(ids)
    twice = sorted(i for i, count in counts.items() if count > 1)
    if twice:
        problems.append(f"{where}: ids {', '.join(twice[:MAX_ROWS_SHOWN])} repeat: each question needs its own id "
                        "(answers are scored per id)")
    return datasets.Dataset.from_dict({"id": ids, "question": data[question], "context": data[context],
                                       "answers": answers})


def check_answers(contexts: list, answers: list, where: str, field: str, problems: list[str]) -> list[dict]:
    """Each answer is its context's text at its ``answer_start`` (else every window of it would be read as "no
    answer", or train towards the wrong span); a question without one is unanswerable (SQuAD v2): empty lists, never
    an empty text or a negative offset. An answer text with whitespace around it (spaces, NBSP, tabs, CR/LF) has one
    right reading: the text stripped, at the offset moved past the stripped characters (or at its offset as given,
    where that is where the stripped text stands); it is read so (:func:`stripped`), and refused only where the
    stripped text stands at neither. The answers as read come back."""
    found: dict[str, list[int]] = {}
    out = []
    for row, (context, answer) in enumerate(zip(contexts, answers)):
        pairs = list(zip(answer["text"], answer["answer_start"]))
        if not all(isinstance(text, str) and isinstance(start, int) and not isinstance(start, bool)
                   for text, start in pairs):
            kind = "untyped"
        elif any(not text.strip() or start < 0 for text, start in pairs):
            kind = "empty"
        elif None in (moved := [stripped(context, text, start) for text, start in pairs]):
            kind = "off"
        else:
            out.append({"text": [t for t, _ in moved], "answer_start": [s for _, s in moved]})
            continue  # answered, or unanswerable (SQuAD v2: the null answer)
        out.append(answer)
        found.setdefault(kind, []).append(row)
    for kind, rows in found.items():
        problems.append(f"{where}: rows {rows_text(rows)}: {field}: {ANSWER_PROBLEMS[kind]}")
    return out


def stripped(context: str, text: str, start: int) -> tuple[str, int] | None:
    """An answer's text without surrounding whitespace and the offset where the context holds it: the given offset
    moved past the leading whitespace, or the given offset itself (a corpus whose offsets point at the stripped
    text); ``None`` where the context holds it at neither."""
    bare = text.strip()
    for at in (start + len(text) - len(text.lstrip()), start):
        if context[at:at + len(bare)] == bare:
            return bare, at
    return None


def stripped_count(before: list[dict], after: list[dict]) -> int:
    """How many answers :func:`check_answers` stripped of surrounding whitespace."""
    return sum(a != b for x, y in zip(before, after) for a, b in zip(x["text"], y["text"]))


ANSWER_PROBLEMS = {
    "untyped": "each answer's text must be text and its answer_start a whole number (a null, a number or a string "
               "found)",
    "empty": "an empty answer text or a negative answer_start: an unanswerable question has empty lists (text: [], "
             "answer_start: [])",
    "off": "the context does not hold the answer text at its answer_start, nor (surrounding whitespace stripped) "
           "at that offset moved past the whitespace (a shifted offset, an answer past the context's end, or text not "
           "in it)",
}
"""What each kind of bad answer is, and the way out."""
