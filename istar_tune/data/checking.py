"""The one checker every format's table takes (:mod:`istar_tune.data.reading` reads csv, tsv, json, parquet,
the hub and the GLUE layout's files into one shape): the fields exist and the text fields hold text, the labels
follow the one rule (:mod:`istar_tune.tasks.labels`: canonical numbers, placeholders and ``drop_labels``, one label
a row, classes stated), a regression's scores are numbers, and an extractive-QA split's answers are their contexts'
spans with ids of their own (a question without an answer is unanswerable: SQuAD v2). Every problem of a split is
reported at once, naming the file and rows; the resolved task and the normalised splits come back."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import datasets

from istar_tune.data.answers import qa_split, stripped_count
from istar_tune.data.headers import header_rows
from istar_tune.data.rows import MAX_ROWS_SHOWN, rows_text, value_kind
from istar_tune.errors import DataError
from istar_tune.tasks.labels import (
    LabelColumn,
    column_problems,
    distinct_labels,
    how_they_differ,
    is_number,
    label_value,
    mixed_labels,
    number_key,
    one_based,
    quantity_labels,
    read_column,
    spelling_variants,
)
from istar_tune.tasks.task import CLASSIFICATION, DEFAULT_METRIC, EXTRACTIVE_QA, REGRESSION, SPLITS, Task
from istar_tune.tasks.values import excerpt, label_text, names_text


def normalise(task: Task, loaded: dict[str, datasets.Dataset], files: dict | None,
               problems: list[str]) -> tuple[Task, dict[str, datasets.Dataset]]:
    """Check every split against the definition and bring it to the one shape; the resolved task."""
    where = where_of(task, files)
    task = _fields(task, loaded, where, problems)
    if problems:
        return task, loaded
    text_fields = task.text_fields
    _check_text_fields(task, loaded, where, problems)
    header_rows(task, loaded, where, problems)
    if problems:
        return task, loaded
    if task.problem_type == EXTRACTIVE_QA:
        splits = {split: qa_split(task, loaded[split], where[split], problems) for split in SPLITS}
        if not problems and any(not a["text"] for split in SPLITS for a in splits[split]["answers"]):
            task = replace(task, unanswerable=True)  # SQuAD v2: the null answer trains and is scored
        if not problems:
            read = ["train"] if loaded["validation"] is loaded["train"] else SPLITS  # one file as both: once
            task = replace(task, answers_stripped=sum(stripped_count(loaded[s][task.label_field], splits[s]["answers"])
                                                      for s in read))
        return task, splits
    columns: dict[str, LabelColumn] = {}
    if task.problem_type == CLASSIFICATION:  # a regression's scores are read as numbers by label_value alone
        declared = task.label_values or task.label_names  # a class named like a placeholder, declared, is a class
        columns = {split: read_column(loaded[split][task.label_field], task.drop_labels, declared) for split in SPLITS}
        for split in SPLITS:  # rows without a label; the other rows are still read (their problems said too)
            problems += column_problems(columns[split], where[split], rows_text)
        emptied = [split for split in SPLITS if columns[split].texts and not columns[split].missing
                   and not columns[split].structured and all(t is None for t in columns[split].texts)]
        problems += [f"{where[split]}: drop_labels {list(task.drop_labels)} drops every row of the {split} split: "
                     "nothing is left; drop fewer labels" for split in emptied]
        before = len(problems)
        task = _classes(task, columns, where, problems) if not emptied else task
        if len(problems) > before or emptied:  # the classes themselves are in doubt: no row is read against them
            return task, loaded
    splits, dropped = {}, []
    for split in SPLITS:
        data = loaded[split]
        if task.problem_type == CLASSIFICATION:
            column = columns[split]
            keep = [i for i, text in enumerate(column.texts) if text is not None]
            dropped.append(len(data) - len(keep))
            if len(keep) < len(data):
                data = data.select(keep)
            raw = [column.texts[i] for i in keep]
        else:
            raw = data[task.label_field]
        labels = _labels(task, raw, where[split], split, problems,
                         origin=keep if task.problem_type == CLASSIFICATION else None)
        splits[split] = data.select_columns(list(text_fields)).add_column("label", labels)
        if split == "train" and task.problem_type == REGRESSION and labels:
            task = replace(task, observed_scores=(min(labels), max(labels)))
    if task.problem_type == CLASSIFICATION:
        counts = Counter(splits["train"]["label"]) if not problems else Counter()
        task = replace(task, dropped=(dropped[0], dropped[1]),
                       class_counts=tuple(counts[i] for i in range(len(task.label_names))) if counts else ())
    if not problems:
        problems += cut_problems(task, splits, where, "")
    return task, splits


def where_of(task: Task, files: dict | None) -> dict[str, str]:
    """How a refusal names each split: its file, or the hub's data set and split."""
    def named(source) -> str:
        if isinstance(source, list):  # a split in parts: its rows are counted across them, in order
            return f"{' + '.join(map(str, source))} (rows counted across the {len(source)} files, in this order)"
        return ", ".join(map(str, source.values())) if isinstance(source, dict) else str(source)

    return {split: (named(files[split]) if files else f"hub {task.hub.path} split {split}") for split in SPLITS}


SPLIT_WORDS = {"train": "training", "validation": "validation"}


def cut_problems(task: Task, splits: dict[str, datasets.Dataset], where: dict[str, str], cut: str) -> list[str]:
    """What the splits a cut leaves (``cut`` says which: the first N rows; "" for the whole files) cannot be trained
    or scored on: an empty split, one training class, a constant score (nothing to learn; a correlation of a constant
    is undefined)."""
    problems = []
    for split, data in splits.items():
        if len(data) == 0 and cut:
            problems.append(f"{where[split]}: {cut}: the {split} split is empty")
    fix = (": is the file sorted by label? shuffle it, or raise that limit" if cut else
           " (check label_field, or the file)")
    train = splits.get("train")
    if task.problem_type == CLASSIFICATION and train is not None and len(set(train["label"])) == 1:
        name = task.label_names[train["label"][0]]
        problems.append(f"{where['train']}: {cut + ': ' if cut else ''}every training label is {excerpt(name)}: a "
                        f"classifier needs two classes or more{fix}")
    if task.problem_type == REGRESSION:
        for split, data in splits.items():
            if len(data) and len(set(data["label"])) == 1:
                why = "nothing to learn" if split == "train" else f"{task.metric} is undefined on a constant"
                problems.append(f"{where[split]}: {cut + ': ' if cut else ''}every {SPLIT_WORDS[split]} score is "
                                f"{data['label'][0]:g}: {why}{fix if cut else ': is label_field the score?'}")
    return problems


def _fields(task: Task, loaded: dict[str, datasets.Dataset], where: dict[str, str], problems: list[str]) -> Task:
    """Each split is not empty and holds the input and label fields (the input named, or the default one); the
    problem type the labels decide where the definition leaves it to them."""
    for split in SPLITS:
        if len(loaded[split]) == 0:
            problems.append(f"{where[split]}: the {split} split is empty: give at least one example")
    if task.infer_problem_type and task.label_field in loaded["train"].column_names:
        task = _infer_problem_type(task, loaded["train"][task.label_field])
    text_fields = task.text_fields or _default_text_fields(task, loaded["train"], where["train"], problems)
    wanted = [*text_fields, task.label_field]
    for split in SPLITS:
        columns = loaded[split].column_names
        if not columns:
            continue  # empty: said above
        missing = [name for name in wanted if name not in columns]
        separated = next((c for c in SEPARATOR_GUESSES if len(columns) == 1 and task.label_field in [
            part.strip() for part in columns[0].split(c)]), None)
        if missing and separated:
            problems.append(f"{where[split]}: no field {', '.join(map(repr, missing))}: its one field "
                            f"{excerpt(columns[0])} holds {separated!r}: a {separated!r}-separated file? give "
                            f"separator: {separated!r} in the task's definition (--separator on the command line)")
        elif missing:
            problems.append(f"{where[split]}: no field {', '.join(map(repr, missing))} (its fields: "
                            f"{names_text(columns)}): set text_fields and label_field to fields that exist")
    return replace(task, text_fields=text_fields)


SEPARATOR_GUESSES = ";|:^~@#"
"""Separators a one-field header is split at to see whether the file is delimited by one of them."""


def _check_text_fields(task: Task, loaded: dict[str, datasets.Dataset], where: dict[str, str],
                       problems: list[str]) -> None:
    """Every text field (a QA task's question and context too) holds text: a null, a number, a list or a mapping in
    one is refused, naming the field and its rows; so is a cell over :data:`MAX_CELL_CHARS`."""
    for split in SPLITS:
        data = loaded[split]
        for name in task.text_fields:
            values = data[name]
            empty = [i for i, value in enumerate(values) if value is None or value == ""]
            if empty:
                problems.append(f"{where[split]}: rows {rows_text(empty)}: text field {name!r} is empty")
            other = [i for i, value in enumerate(values) if value is not None and not isinstance(value, str)]
            if other:
                kinds = sorted({value_kind(values[i]) for i in other})
                problems.append(f"{where[split]}: rows {rows_text(other)}: text field {name!r} holds "
                                f"{', '.join(kinds)}, not text: a model reads text; name a text field with "
                                "text_fields, or write it as text")
            texts = [value for value in values if isinstance(value, str) and value.strip()]
            if texts and not other and all(is_number(value) for value in texts):
                shown = ", ".join(map(repr, texts[:3])) + (", …" if len(texts) > 3 else "")
                problems.append(f"{where[split]}: text field {name!r} holds numbers only ({shown}), not text: an id "
                                "or a score named as input? name the text field with text_fields")
            sizes = [len(value) if isinstance(value, str) else 0 for value in values]
            longest = max(range(len(sizes)), key=sizes.__getitem__, default=0)
            if sizes and sizes[longest] > MAX_CELL_CHARS:
                problems.append(f"{where[split]}: row {longest + 1}: text field {name!r} holds "
                                f"{sizes[longest]:,} characters, over {MAX_CELL_CHARS:,} a cell (a model reads "
                                "max_length tokens of it; every trial would hold it whole): cut it, or split it into "
                                "rows")


def _classes(task: Task, columns: dict[str, LabelColumn], where: dict[str, str], problems: list[str]) -> Task:
    """The label rule's class checks (:mod:`istar_tune.tasks.labels`): the task with its class names."""
    train, dev = columns["train"], columns["validation"]
    if not task.label_names:
        task = replace(task, label_names=distinct_labels(train.texts, train.numeric))
        if quantities := quantity_labels(task.label_names, train.numeric):
            problems.append(f"{where['train']}: {quantities}")
        elif mixed := mixed_labels(task.label_names):
            problems.append(f"{where['train']}: {mixed}")
        for variants in spelling_variants(task.label_names):
            problems.append(f"{where['train']}: labels {', '.join(map(repr, variants))} {how_they_differ(variants)}: "
                            "are they one class? write them one way, or declare each with label_names: [...]")
        if dev.numeric and not train.numeric and any(t is not None for t in train.texts):
            shown = ", ".join(sorted({t for t in dev.texts if t is not None}, key=number_key)[:3])
            problems.append(f"{where['validation']}: its labels are numbers ({shown}) where the training split's are "
                            f"words ({names_text(task.label_names, 3)}): no index is guessed; write the same labels "
                            "in both, or give label_names: [...] (then a number in 0..N-1 names the class at that "
                            "index)")
        if task.metric == "f1" and len(task.label_names) != 2:
            problems.append(f"{task.source}: metric: f1 is binary F1, but the training split has "
                            f"{len(task.label_names)} classes ({names_text(task.label_names)}): use f1_macro")
        elif task.positive_label and task.positive_label not in task.label_names:
            problems.append(f"{task.source}: positive_label {task.positive_label!r} is not a class of the training "
                            f"split ({names_text(task.label_names)})")
    elif not task.label_values and one_based(train.texts, train.numeric, task.label_names):
        names = task.label_names
        problems.append(f"{where['train']}: labels 1..{len(names)} against label_names {list(names)} look 1-based, "
                        "but a list's labels are 0-based indices: give a mapping, label_names: {1: "
                        f"{names[0]}, 2: {names[1]}, ...}}")
    return task


INFERRED_CLASSES_HINT = 10
"""Whole-number labels with more distinct values than this are read as classes with a hint that they may be scores."""


def _infer_problem_type(task: Task, labels: list) -> Task:
    """The problem type the training labels say, as ``datasets`` read them (``run_glue.py`` asks the column's dtype):
    numbers with decimals are scores (regression, metric pearson); whole numbers, words or yes/no are classes."""
    column = read_column(labels)  # numbers written as text ("3.8") are numbers too
    values = [float(t) for t in column.texts if t is not None] if column.numeric else [
        t for t in column.texts if t is not None]
    numbers = column.numeric
    if numbers and any(not v.is_integer() for v in values):
        why = "labels are numbers with decimals; if they are classes, say problem_type: classification"
        return replace(task, problem_type=REGRESSION, metric=DEFAULT_METRIC[REGRESSION], infer_problem_type=False,
                       inferred=why)
    distinct = len(set(values))
    why = "labels are whole numbers" if numbers else "labels are words"
    if numbers and distinct > INFERRED_CLASSES_HINT:
        why += (f", {distinct} distinct: if they are scores, say problem_type: regression (--problem-type "
                "regression)")
    return replace(task, infer_problem_type=False, inferred=why)


def _default_text_fields(task: Task, train: datasets.Dataset, where: str, problems: list[str]) -> tuple[str, ...]:
    """The input fields when the definition names none: the one field besides the label, or ``sentence1`` and
    ``sentence2`` when they are the only two. Anything else is refused, naming the fields (``run_glue.py`` would take
    the first two: a second label column or an id would become model input), and so is a field whose values decide
    the label (every value of it belongs to one class)."""
    if not train.column_names or task.label_field not in train.column_names:
        return ()  # an empty split, or no label field: said where the fields are checked
    others = [c for c in train.column_names if c != task.label_field]
    if len(others) == 1 or sorted(others) == ["sentence1", "sentence2"]:
        fields = ("sentence1", "sentence2") if len(others) == 2 else (others[0],)
    else:
        if not others:
            problems.append(f"{where}: the data has no field besides the label {task.label_field!r} "
                            f"({', '.join(train.column_names) or 'no fields'}): nothing for the model to read; add the "
                            "text, or name its field with text_fields (a headerless file: column_names)")
        else:
            problems.append(f"{where}: which fields are the input? Besides the label {task.label_field!r} the data "
                            f"has {len(others)} fields ({', '.join(others)}): name the input with text_fields: [...] "
                            "(--text-fields A[,B] on the command line)")
        return ()
    if task.problem_type == CLASSIFICATION and task.label_field in train.column_names:
        for field in fields:
            if _decides(train[field], train[task.label_field]):
                problems.append(f"{where}: field {field!r} decides the label (each of its values belongs to one "
                                "class): it is not taken as input unless named with text_fields (--text-fields)")
    return fields


CATEGORY_ROWS = 5
"""A column with at most one distinct value per this many rows is a category, not a text (rows repeated two or three
times leave a text column a text)."""


def _decides(values: list, labels: list) -> bool:
    """Whether a column is a category (:data:`CATEGORY_ROWS`) whose every value belongs to one class."""
    classes: dict[str, set[str]] = {}
    for value, label in zip(values, labels):
        classes.setdefault(label_text(value), set()).add(label_text(label))
    return 2 <= len(classes) <= len(values) / CATEGORY_ROWS and all(len(c) == 1 for c in classes.values())


def _labels(task: Task, values: list, where: str, split: str, problems: list[str],
            origin: list[int] | None = None) -> list:
    """Each value's label id or score; the rows (of the file: ``origin`` maps kept rows back) whose value is not one
    are reported once per split."""
    out, bad, reasons = [], {}, {}
    for index, value in enumerate(values):
        try:
            out.append(label_value(task, value, where))
        except DataError as err:
            bad.setdefault(label_text(value), []).append(origin[index] if origin is not None else index)
            reason = str(err).split(": ", 1)[-1].replace(repr(value), "{}", 1)
            reasons.setdefault(reason, {}).setdefault(excerpt(value), []).append(
                origin[index] if origin is not None else index)
            out.append(0)
    if bad:  # one problem per split: its rows and its first few bad values
        rows = sorted(i for indices in bad.values() for i in indices)
        values = ", ".join(excerpt(v) for v in list(bad)[:MAX_ROWS_SHOWN])
        values += f" and {len(bad) - MAX_ROWS_SHOWN} more" if len(bad) > MAX_ROWS_SHOWN else ""
        plural = len(bad) > 1
        if task.problem_type == REGRESSION:  # each reason once (not a number, not finite, off the scale)
            for reason, found in reasons.items():
                shown = ", ".join(list(found)[:MAX_ROWS_SHOWN]) + (
                    f" and {len(found) - MAX_ROWS_SHOWN} more" if len(found) > MAX_ROWS_SHOWN else "")
                if len(found) > 1:  # said of several values
                    reason = (reason.replace("score {} is not a number", "scores {} are not numbers")
                              .replace("score {} is a yes/no value, not a number", "scores {} are yes/no values, not "
                                       "numbers").replace("score {} is", "scores {} are"))
                problems.append(f"{where}: rows {rows_text(sorted(r for rs in found.values() for r in rs))}: "
                                + reason.replace("{}", shown, 1))
        else:
            declared = task.indexed_labels or bool(task.label_values)  # else the classes are the training split's
            unseen = " (the training split never shows it)" if split == "validation" and not plural else ""
            unseen = " (the training split never shows them)" if split == "validation" and plural else unseen
            unseen = "" if declared else unseen
            shown = task.label_values or task.label_names
            decimals = [v for v in bad if is_number(v) and not float(v).is_integer()]
            hint = ("; scores with decimals? say problem_type: regression (--problem-type regression)" if decimals
                    and all(is_number(n) for n in task.label_names) else "")
            problems.append(f"{where}: rows {rows_text(rows)}: label{'s' if plural else ''} {values} "
                            f"{'are' if plural else 'is'} not one of {names_text(shown)}{unseen}{hint}")
    return out


MAX_CELL_CHARS = 1_000_000
"""The most characters one text cell may hold (a 512-token window reads about 3,000)."""
