"""Generated inputs through the one reading path (``task_of`` on a definition, then ``read_task``: what ``train``,
``search`` and ``analyze`` call): tables of odd label and text values in every file format. Each outcome is either a
refusal, every line of it one line naming a file, or a reading equal to an independent reference reading of the stated
label rule (class names and each row's class id). Bounded here; ``make fuzz`` runs many more examples
(``HYPOTHESIS_PROFILE=fuzz``)."""

from __future__ import annotations

import json
import math
import os

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from istar_tune.data.reading import read_task
from istar_tune.errors import IstarTuneError
from istar_tune.tasks import task_of

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
GENERATED = settings(max_examples=400 if FUZZ else 15, deadline=None, derandomize=not FUZZ,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
"""This module's examples: 15 a test, the same every run (CI); 400 drawn anew with ``HYPOTHESIS_PROFILE=fuzz``
(``make fuzz``). Set per test, never as hypothesis's global profile, which other modules' tests would inherit."""

SPELLINGS = {0: ["0", "00", "0.0", 0, 0.0], 1: ["1", "01", "1.0", "1e0", 1], 2: ["2", "2.0", 2]}
"""How a file may write each number class: one class however it is written."""
WORDS = ["negative", "positive", "neutral"]
PLACEHOLDERS = [None, "nan", "", "-", "?", "n/a", "null"]
STRUCTURED = [[0, 1], [1], {"label": 1}]
CASE_VARIANTS = ["Positive", "NEGATIVE"]
"""Spellings of two classes that differ only in case: a class of their own unless the other spelling is there too."""
FORMATS = ["csv", "tsv", "jsonl", "json", "parquet"]


@st.composite
def columns(draw, fmt: str):
    """A (train, validation) pair of label columns and the odd values planted in them."""
    kind = draw(st.sampled_from(["numbers", "words"]))
    odd_pool = PLACEHOLDERS + ([] if fmt in ("csv", "tsv", "parquet") else STRUCTURED)
    if kind == "words":
        odd_pool = odd_pool + CASE_VARIANTS

    def column(size: int, classes: list[int], dev_kind: str):
        values = []
        for c in classes[:size]:
            if dev_kind == "numbers":
                values.append(draw(st.sampled_from(SPELLINGS[c])) if fmt != "parquet" else str(c))
            else:
                values.append(WORDS[c])
        return values

    train_classes = draw(st.lists(st.integers(0, 2), min_size=4, max_size=10))
    dev_classes = draw(st.lists(st.integers(0, 2), min_size=2, max_size=6))
    dev_kind = draw(st.sampled_from([kind, kind, kind, "numbers" if kind == "words" else "words"]))
    train = column(len(train_classes), train_classes, kind)
    dev = column(len(dev_classes), dev_classes, dev_kind)
    planted = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 9), st.sampled_from(odd_pool)), max_size=2))
    for in_train, row, value in planted:
        target = train if in_train else dev
        target[row % len(target)] = value
    odd = [v for v in train + dev if any(v == o and type(v) is type(o) for o in odd_pool)]  # what stayed planted
    return kind, dev_kind, train, dev, odd


def _write(folder, name: str, fmt: str, labels: list, texts: list | None = None) -> str:
    texts = texts or [f"text number {i}" for i in range(len(labels))]
    frame = pd.DataFrame({"text": texts, "label": labels})
    path = folder / f"{name}.{fmt}"
    if fmt in ("csv", "tsv"):
        frame.to_csv(path, sep="," if fmt == "csv" else "\t", index=False)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in frame.to_dict("records")))
    elif fmt == "json":
        path.write_text(json.dumps(frame.to_dict("records")))
    else:
        frame.to_parquet(path, index=False)
    return str(path)


def _reference(kind: str, dev_kind: str, train: list, dev: list, odd: list):
    """The stated rule, read independently: ``None`` where it refuses, else (class names, train ids, dev ids)."""
    if [v for v in odd if v not in CASE_VARIANTS] or kind != dev_kind:
        return None

    def canonical(value):
        if kind == "words":
            return value
        number = float(value)
        return str(int(number)) if number.is_integer() else repr(number)

    train_texts, dev_texts = [canonical(v) for v in train], [canonical(v) for v in dev]
    names = sorted(set(train_texts), key=float if kind == "numbers" else str)
    folded = {n.casefold() for n in names}
    if len(names) < 2 or not set(dev_texts) <= set(names) or len(folded) < len(names):
        return None
    return tuple(names), [names.index(t) for t in train_texts], [names.index(t) for t in dev_texts]


def _read(folder, train_file: str, dev_file: str, fmt: str):
    definition = {"name": "generated", "train": train_file, "validation": dev_file, "text_fields": ["text"],
                  "format": "json" if fmt == "jsonl" else fmt}
    try:
        return read_task(task_of(definition, folder))
    except IstarTuneError as err:
        return err


def _assert_one_line_refusal(err: IstarTuneError) -> None:
    problems = getattr(err, "problems", None) or [str(err)]
    assert problems and all("\n" not in p and p.strip() for p in problems), problems
    assert all("Traceback" not in p for p in problems)


@pytest.mark.parametrize("fmt", FORMATS)
@GENERATED
@given(data=st.data())
def test_labels_read_by_the_rule_or_refused_in_one_line(fmt, data, tmp_path_factory):
    kind, dev_kind, train, dev, odd = data.draw(columns(fmt))
    if fmt == "parquet":  # one arrow type a column: a mixture cannot be written, so it is not a case
        assume(len({type(v) for v in train + dev if v is not None}) <= 1)
    folder = tmp_path_factory.mktemp("generated")
    outcome = _read(folder, _write(folder, "train", fmt, train), _write(folder, "dev", fmt, dev), fmt)
    expected = _reference(kind, dev_kind, train, dev, odd)
    if expected is None:
        assert isinstance(outcome, IstarTuneError), (train, dev, outcome)
        _assert_one_line_refusal(outcome)
        return
    assert not isinstance(outcome, Exception), (train, dev, outcome)
    task, splits = outcome
    names, train_ids, dev_ids = expected
    assert task.label_names == names
    assert splits["train"]["label"] == train_ids and splits["validation"]["label"] == dev_ids


ODD_TEXTS = [None, 7, 3.5, ["a", "b"], {"nested": "object"}]


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
@GENERATED
@given(planted=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(ODD_TEXTS)), max_size=2),
       text=st.text(min_size=1, max_size=30).filter(lambda t: t.strip() and "\x00" not in t))
def test_a_text_field_holds_text_or_is_refused_in_one_line(fmt, planted, text, tmp_path_factory):
    texts = [f"{text} {i}" for i in range(6)]
    for row, value in planted:
        texts[row] = value
    folder = tmp_path_factory.mktemp("texts")
    labels = [0, 1, 0, 1, 0, 1]
    outcome = _read(folder, _write(folder, "train", fmt, labels, texts), _write(folder, "dev", fmt, [0, 1]), fmt)
    if planted:
        assert isinstance(outcome, IstarTuneError), outcome
        _assert_one_line_refusal(outcome)
        assert "text field 'text'" in str(outcome) or "different kinds" in str(outcome)
    else:
        assert not isinstance(outcome, Exception), outcome
        assert outcome[1]["train"]["text"] == texts  # read as written, BOMs and odd characters included


@GENERATED
@given(shifts=st.lists(st.integers(-3, 3), min_size=3, max_size=3), words=st.lists(
    st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), min_size=6, max_size=12))
def test_answers_are_their_contexts_spans_or_refused(shifts, words, tmp_path_factory):
    context = " ".join(words)
    rows = []
    for i, shift in enumerate(shifts):
        start = context.index(words[i + 1])
        rows.append({"id": f"q{i}", "question": f"which word {i}?", "context": context,
                     "answers": {"text": [words[i + 1]], "answer_start": [max(start + shift, 0)]}})
    folder = tmp_path_factory.mktemp("qa")
    for name in ("train", "dev"):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    definition = {"name": "qa", "train": "train.jsonl", "validation": "dev.jsonl", "problem_type": "extractive_qa"}
    try:
        outcome = read_task(task_of(definition, folder))
    except IstarTuneError as err:
        outcome = err
    held = [context[r["answers"]["answer_start"][0]:][:len(r["answers"]["text"][0])] == r["answers"]["text"][0]
            for r in rows]
    if all(held):
        assert not isinstance(outcome, Exception), outcome
        assert outcome[1]["train"]["answers"] == [r["answers"] for r in rows]
    else:
        assert isinstance(outcome, IstarTuneError) and "does not hold the answer text" in str(outcome)
        _assert_one_line_refusal(outcome)


def test_the_reference_itself_reads_number_spellings_as_one_number():
    names, ids, _ = _reference("numbers", "numbers", ["01", 1, "1e0", "0.0"], ["1"], [])
    assert names == ("0", "1") and ids == [1, 1, 1, 0] and math.isclose(float(names[1]), 1.0)
