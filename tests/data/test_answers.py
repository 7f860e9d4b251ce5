"""An extractive-QA split's answers: spans of their contexts, an unanswerable question written as empty lists, and
every answer that would train the wrong span refused naming its rows."""

from __future__ import annotations

from dataclasses import replace

import datasets
import pytest

from istar_tune.data.answers import ANSWER_PROBLEMS, check_answers, qa_split
from istar_tune.tasks import get_task

CONTEXT = "The capital of France is Paris, a city on the Seine."
PARIS = CONTEXT.index("Paris")


@pytest.mark.parametrize(("answer", "kind"), [
    ({"text": [""], "answer_start": [0]}, "empty"),                   # an IndexError before
    ({"text": [" \u00a0"], "answer_start": [0]}, "empty"),
    ({"text": ["Paris"], "answer_start": [-1]}, "empty"),             # trained towards [CLS] without a word
    ({"text": ["Paris"], "answer_start": [PARIS + 1]}, "off"),
    ({"text": [" Paris"], "answer_start": [PARIS + 1]}, "off"),       # neither the moved nor the given offset
    ({"text": ["Paris"], "answer_start": ["25"]}, "untyped"),
])
def test_an_answer_that_would_train_the_wrong_span_is_refused(answer, kind):
    good = {"text": ["Paris"], "answer_start": [PARIS]}
    problems: list[str] = []
    check_answers([CONTEXT] * 3, [good, answer, {"text": [], "answer_start": []}], "dev.jsonl", "answers", problems)
    assert problems == [f"dev.jsonl: rows 2: answers: {ANSWER_PROBLEMS[kind]}"]


@pytest.mark.parametrize(("text", "start"), [
    (" Paris", PARIS - 1),                    # the offset at the padded text: moved past the space
    ("Paris ", PARIS),                        # trailing: the offset stays
    ("\u00a0Paris\r\n", PARIS),               # the offset already at the bare text (a corpus' own convention)
    ("\tParis", PARIS),
])
def test_an_answer_padded_with_whitespace_reads_stripped_at_the_moved_offset(text, start):
    problems: list[str] = []
    read = check_answers([CONTEXT], [{"text": [text], "answer_start": [start]}], "dev.jsonl", "answers", problems)
    assert not problems and read == [{"text": ["Paris"], "answer_start": [PARIS]}]
    assert CONTEXT[PARIS:PARIS + 5] == "Paris"  # the reference: the bare text where the context holds it


def test_a_split_takes_squads_columns_and_its_own_ids():
    data = datasets.Dataset.from_dict({"q": ["Where?", "Which?"], "c": [CONTEXT, CONTEXT], "a": [
        {"text": ["Paris"], "answer_start": [PARIS]}, {"text": [], "answer_start": []}]})
    task = replace(get_task("squad"), text_fields=("q", "c"), label_field="a")
    problems: list[str] = []
    split = qa_split(task, data, "dev.jsonl", problems)
    assert not problems and split.column_names == ["id", "question", "context", "answers"]
    assert split["id"] == ["0", "1"] and split["answers"][1] == {"text": [], "answer_start": []}
