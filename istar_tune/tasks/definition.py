"""Task definitions: a small YAML mapping (a file, or inline in a search space's ``tasks:``) ↔ a :class:`Task`.

Every problem that can be seen without reading the data is reported at once, one line each with where the
definition came from: an unknown key, a missing file, a format or metric that does not fit. What needs the data
(fields, labels, sizes, checksums) is checked where the data is read (:mod:`istar_tune.data.reading`).

A definition (user-facing keys)::

    name: tickets                 # required; not the name of a shipped task
    display_name: Tickets         # tables and plots (default: name)
    problem_type: classification  # classification, regression or extractive_qa (default: what the metric, label_names
                                  # or score_range imply, else the labels: numbers with decimals are regression)
    train: data/train.csv         # files relative to this file's folder (csv, tsv, json/jsonl, parquet); a split
                                  # in parts: a list [a.csv, b.csv] or a pattern data/train-*.csv (name order) ...
    validation: data/dev.csv      # ... or validation_split: 0.1 (seeded by split_seed, class-stratified)
                                  # parallel files: train: {text: train.txt, label: train.labels} (format lines)
    format: csv                   # ... format from the extension unless given
    hub: {path: glue, name: mrpc, train_split: train, validation_split: validation}   # ... or a hub data set
    text_fields: [subject, body]  # one field or a pair (default only when the data holds one field besides the
                                  # label, or just sentence1 and sentence2; else it must be named)
    label_field: label
    label_names: [billing, bug]   # default: the training split's distinct values, sorted (2 or more); a list also
                                  # reads 0-based indices; a mapping {1: World, 2: Sports} names each label value
    drop_labels: ['-']            # label values whose rows are dropped (a no-consensus placeholder), counted
    column_names: [label, text]   # csv/tsv without a header row: its columns, in order
    separator: ';'                # a delimited file's one-character separator (format csv, quoted cells; .txt too)
    score_range: [0, 5]           # regression: the scale of its scores (a score outside it is refused)
    metric: f1_macro              # accuracy, f1, f1_macro, mcc | pearson, spearman | QA: f1, exact_match
    positive_label: bug           # metric f1 of a classification: the class whose F1 it is (required)
    encoding: latin-1             # csv, tsv, json: the files' text encoding (default utf-8)
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from istar_tune.errors import ConfigError, unknown_keys
from istar_tune.tasks.layout import (
    encoding_of,
    files_and_format,
    glue_layout,
    hub_source,
    problem_type_held,
    separator_of,
    split_column,
    split_share,
    takes,
    with_key,
)
from istar_tune.tasks.task import (
    CLASSIFICATION,
    DEFAULT_ENCODING,
    DEFAULT_METRIC,
    EXTRACTIVE_QA,
    IN_DATA_FOLDER,
    IN_DEFINITION_FOLDER,
    METRICS,
    PROBLEM_TYPES,
    REGRESSION,
    SPLITS,
    Task,
)
from istar_tune.tasks.values import canonical_number, label_text
from istar_tune.yamlfile import load_yaml

KEY_DOCS = {
    "name": "Required: the task's name (not a shipped task's); the MLflow `task` tag, a table's column.",
    "display_name": "How tables and plots name it (default: `name`).",
    "problem_type": "classification, regression or extractive_qa (default: what `metric`, `label_names` or "
                    "`score_range` imply, else the labels: numbers with decimals are regression).",
    "train": "The training file, relative to the definition's folder (csv, tsv, json/jsonl, parquet); a split in "
             "parts: a list of files (`[part-1.csv, part-2.csv]`) or a pattern (`data/train-*.csv`, its matches in "
             "name order), read in order and joined.",
    "validation": "The validation file, in the same format (parts, as `train`; parallel files: `{field: file}` for "
                  "each split).",
    "validation_split": "No validation file: a share of the train file's rows (`0.1`) or a count (`500`) drawn as "
                        "the validation split, seeded, class-stratified for a classification.",
    "split_seed": "The seed of `validation_split`'s draw (default 0).",
    "split_field": "No validation file: the train file's column that names each row's split (the authors' own "
                   "split); rows of other splits (test) are left out and counted.",
    "split_values": "With `split_field`: the values meaning each split, `{train: [train], validation: [validation, "
                    "dev, val]}` (the default).",
    "format": "csv, tsv, json, parquet, lines (parallel files), glue, ptb or squad (default: from the extension; "
              "splits given as `{field: file}`: lines).",
    "separator": "A delimited file's one character between fields (`';'`): read as csv, whatever the extension.",
    "encoding": "csv, tsv, json: the files' text encoding (default utf-8).",
    "column_names": "A headerless csv/tsv file's columns, in order.",
    "hub": "A Hugging Face hub data set instead of files: `{path, name, train_split, validation_split, columns}`.",
    "text_fields": "The input field, or a pair (default only when the data holds one field besides the label, or just "
                   "sentence1 and sentence2).",
    "label_field": "The label field (default `label`; extractive QA: `answers`).",
    "label_names": "The classes: a list in id order (a label is a name or its 0-based index), or a mapping of label "
                   "value to class (default: the training split's labels, sorted).",
    "drop_labels": "Label values whose rows are dropped and counted (a no-consensus placeholder such as `'-'`).",
    "positive_label": "With `metric: f1`: the class whose F1 is reported (required there).",
    "metric": "accuracy, f1, f1_macro, mcc; regression: pearson, spearman; QA: f1, exact_match.",
    "score_range": "Regression: the scores' scale (`[0, 5]`); a score outside it is refused.",
    "unanswerable": "Extractive QA with questions without an answer (SQuAD v2); set when the data holds one.",
    "files_in": "`definition` (files relative to the definition) or `data_dir` (to the data folder: shipped tasks).",
    "glue": "`format: glue`: the TSV's layout, `{header, num_columns, columns}`.",
    "examples": "Recorded when the definition is resolved: the splits' sizes `{train, validation}`.",
    "checksums": "Recorded when the definition is resolved: each file's `sha256:`, checked wherever it is read again.",
}
"""Every key a task definition may hold and what it means (``istar-tune reference`` prints them)."""
KEYS = tuple(KEY_DOCS)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFINITION_SUFFIXES = (".yaml", ".yml")


def looks_like_definition_path(reference: str) -> bool:
    """Whether a task reference names a definition file rather than a task (``./tickets.yaml``, ``tasks/x.yml``)."""
    return reference.lower().endswith(DEFINITION_SUFFIXES) or "/" in reference or "\\" in reference


def load_task_file(path: str | Path, reserved: Collection[str] = ()) -> Task:
    """The task a definition file describes (relative paths start at the file's folder)."""
    path = Path(path).expanduser()
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"task definition {str(path)!r} {what}: give a YAML file (see "
                          "docs/tasks.md) or a task name")
    return task_from_mapping(load_yaml(path), path.resolve().parent, source=str(path), reserved=reserved)


def task_from_mapping(raw: Mapping[str, Any], base_dir: str | Path | None = None, source: str = "task definition",
                      reserved: Collection[str] = (), shipped: bool = False) -> Task:
    """A :class:`Task` from a definition mapping; one :class:`ConfigError` listing every problem. ``reserved``: names
    a user's task may not take (the shipped tasks' names and aliases)."""
    problems: list[str] = []

    def problem(key: str, text: str) -> None:
        problems.append(f"{source}: {key}: {text}")

    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: a task definition is a mapping of keys to values, got {type(raw).__name__}")
    unknown = [key for key in raw if key not in KEYS]
    if unknown:
        problem(*unknown_keys(unknown, KEYS))
    name = _name(raw, reserved, problem)
    files_in = raw.get("files_in", IN_DEFINITION_FOLDER)
    if files_in not in (IN_DEFINITION_FOLDER, IN_DATA_FOLDER):
        problem("files_in", f"must be {IN_DEFINITION_FOLDER} or {IN_DATA_FOLDER}, got {files_in!r}")
    files, file_format = files_and_format(raw, base_dir, files_in, problem)
    problem_type, infer = _problem_type(raw, file_format, problem)
    metric = raw.get("metric", DEFAULT_METRIC[problem_type])
    if metric not in METRICS[problem_type]:
        problem("metric", f"{metric!r} does not fit a {problem_type} task: choose one of "
                          f"{', '.join(METRICS[problem_type])}")
    hub = hub_source(raw.get("hub"), problem)
    if not files and hub is None:
        problem("train", "give the data: train and validation files, or hub: {path: ...}")
    elif files and hub is not None and files_in != IN_DATA_FOLDER:
        problem("hub", "give files or a hub data set, not both")
    if not files and raw.get("validation_split") is not None:
        problem("validation_split", "draws the validation rows from a train file; a hub data set has splits of its "
                                    "own: name them with hub: {validation_split: ...}")
    default_fields = ("question", "context") if problem_type == EXTRACTIVE_QA else ()
    text_fields = _strings(raw.get("text_fields", default_fields), "text_fields", problem, most=2)
    label_field = raw.get("label_field", "answers" if problem_type == EXTRACTIVE_QA else "label")
    _check_fields(text_fields, label_field, problem)
    label_names, label_values = _label_names(raw.get("label_names", []), problem_type, metric, problem)
    reading = _reading(raw, problem_type, file_format, problem)
    positive = _positive_label(raw.get("positive_label"), problem_type, metric, label_names, problem)
    score_range = _score_range(raw.get("score_range"), problem_type, problem)
    examples = _examples(raw.get("examples", {}), problem)
    checksums = raw.get("checksums", {}) or {}
    if not isinstance(checksums, Mapping) or set(checksums) - set(SPLITS):
        problem("checksums", f"must map train/validation to checksums, got {checksums!r}")
        checksums = {}
    glue = glue_layout(raw.get("glue"), file_format, problem)
    encoding = encoding_of(raw.get("encoding", DEFAULT_ENCODING), file_format, problem)
    if problems:
        raise ConfigError(problems)
    return Task(name=name, display_name=str(raw.get("display_name") or name), problem_type=problem_type,
                metric=metric, text_fields=text_fields, label_field=label_field, label_names=label_names,
                label_values=label_values, indexed_labels=bool(label_names) and not label_values,
                **reading,
                score_range=score_range, format=file_format, files=files, files_in=files_in, glue=glue, hub=hub,
                train_examples=examples.get("train", 0), eval_examples=examples.get("validation", 0),
                checksums={k: str(v) for k, v in checksums.items()}, source=source, shipped=shipped,
                infer_problem_type=infer, encoding=encoding, positive_label=positive)


def _problem_type(raw: Mapping[str, Any], file_format: str, problem) -> tuple[str, bool]:
    """(the problem type, whether the data decides it): as given, as the definition implies it, extractive QA for a
    SQuAD file, else classification until the labels say otherwise."""
    problem_type = raw.get("problem_type") or _implied_problem_type(raw)
    holds = problem_type_held(file_format)
    if holds and problem_type is None:
        problem_type = holds  # a SQuAD file holds questions and answers
    elif holds and problem_type != holds:
        problem("format", f"a {file_format} file holds {holds} (questions and answer spans), not a {problem_type} "
                          "task")
    infer = problem_type is None  # the data decides (numbers with decimals: regression), then the metric
    problem_type = problem_type or CLASSIFICATION
    if problem_type not in PROBLEM_TYPES:
        problem("problem_type", f"must be one of {', '.join(PROBLEM_TYPES)}, got {problem_type!r}")
        problem_type = CLASSIFICATION
    return problem_type, infer


def _reading(raw: Mapping[str, Any], problem_type: str, file_format: str, problem) -> dict[str, Any]:
    """How the data is read: ``drop_labels`` (classification), ``column_names`` (a headerless csv/tsv) and
    ``unanswerable`` (extractive QA with questions without an answer)."""
    drop_labels = _strings(raw.get("drop_labels", []), "drop_labels", problem)
    if drop_labels and problem_type != CLASSIFICATION:
        problem("drop_labels", f"only a classification task's labels are dropped by value; this one is {problem_type}")
    unanswerable = raw.get("unanswerable", False)
    if not isinstance(unanswerable, bool) or (unanswerable and problem_type != EXTRACTIVE_QA):
        problem("unanswerable", f"true or false, for an extractive-QA task alone; got {unanswerable!r} for a "
                                f"{problem_type} task")
        unanswerable = False
    column_names = _strings(raw.get("column_names", []), "column_names", problem)
    separator = separator_of(raw.get("separator", ""), file_format, problem)
    if column_names and not takes(file_format, "column_names"):
        files = any(split in raw for split in SPLITS)
        told = (f"is {file_format}" if file_format else "is not told by its files' extension (give format: csv)"
                if files else "is a hub data set")
        problem("column_names", f"names the columns of a {' or '.join(with_key('column_names'))} file without a "
                                f"header; this task's format {told}")
    if len(set(column_names)) < len(column_names):
        problem("column_names", f"each column once, got {list(column_names)}")
    share, seed = split_share(raw, problem)
    split_field, split_values = split_column(raw, problem)
    return {"drop_labels": drop_labels, "column_names": column_names, "unanswerable": unanswerable,
            "separator": separator, "validation_split": share, "split_seed": seed, "split_field": split_field,
            "split_values": split_values}


def _positive_label(value, problem_type: str, metric: str, label_names: tuple[str, ...], problem) -> str:
    """The class a binary F1 is of: required with ``metric: f1`` on a classification (the sorted class names would
    otherwise decide it silently), one of ``label_names`` when they are given."""
    binary_f1 = metric == "f1" and problem_type == CLASSIFICATION
    if value is None:
        if binary_f1:
            known = f": one of {', '.join(map(repr, label_names))}" if label_names else " (one of its two classes)"
            problem("positive_label", f"metric f1 is the F1 of one class: name it with positive_label{known}")
        return ""
    if not binary_f1:
        problem("positive_label", f"only a binary F1 (metric: f1 on a classification) has a positive class; this "
                                  f"task's metric is {metric}")
        return ""
    if isinstance(value, bool):
        problem("positive_label", f"must be a class name, got the yes/no value {value!r}: YAML reads an unquoted no, "
                                  "yes, on, off, true or false as a boolean; quote it (positive_label: 'yes')")
        return ""
    if not isinstance(value, (str, int)):
        problem("positive_label", f"must be a class name, got {value!r}")
        return ""
    if label_names and str(value) not in label_names:
        problem("positive_label", f"{str(value)!r} is not a class of this task ({', '.join(label_names)})")
    return str(value)


def _check_fields(text_fields: tuple[str, ...], label_field, problem) -> None:
    if not isinstance(label_field, str) or not label_field:
        problem("label_field", f"must be a field name, got {label_field!r}")
    if len(set(text_fields)) < len(text_fields):
        problem("text_fields", f"a field once, got {list(text_fields)}: name a single field, or two different ones")
    if label_field in text_fields:
        problem("text_fields", f"{label_field!r} is the label field: the model would read the answer; name the "
                               "input fields only")
    elif "label" in text_fields:
        problem("text_fields", "'label' is the name every task's label takes once read: an input field of that "
                               "name cannot be kept beside it; rename the column")


def _label_names(value, problem_type: str, metric: str, problem) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(class names, their label values): a list names the classes (values empty); a mapping
    ``{label value: class name}`` names the class of each value, in its order."""
    values: tuple[str, ...] = ()
    if isinstance(value, Mapping):
        values = _strings(list(value), "label_names", problem)
        value = list(value.values())
        if len(set(values)) < len(values):
            problem("label_names", f"each label value once, got {list(values)}")
    if isinstance(value, (list, tuple)) and any(isinstance(v, bool) for v in value):
        problem("label_names", f"{list(value)} holds yes/no values where class names are expected: YAML reads an "
                               "unquoted no, yes, on, off, true or false as a boolean; quote each class name "
                               "(label_names: ['no', 'yes'])")
        return (), ()
    label_names = _strings(value, "label_names", problem)
    if label_names and problem_type != CLASSIFICATION:
        problem("label_names", f"only a classification task has class names; this one is {problem_type}")
    if len(set(label_names)) < len(label_names):
        problem("label_names", f"each class once, got {list(label_names)}")
    if len(label_names) == 1:
        problem("label_names", f"a classifier needs two classes or more, got {list(label_names)}")
    if metric == "f1" and problem_type == CLASSIFICATION and label_names and len(label_names) != 2:
        problem("metric", f"f1 is binary F1 (two classes); this task has {len(label_names)}: use f1_macro")
    return label_names, tuple(_canonical(v) for v in values)


def _canonical(value: str) -> str:
    """A label value of a mapping as the data's numbers are read (``01`` and ``1.0`` are ``1``)."""
    return canonical_number(value) or value


def _implied_problem_type(raw: Mapping[str, Any]) -> str | None:
    """The problem type a definition without ``problem_type`` implies: a metric that fits one type only, class names
    (classification) or a scale (regression); ``None``: the data decides."""
    regression = raw.get("metric") in METRICS[REGRESSION] or raw.get("score_range") is not None
    classification = raw.get("metric") in METRICS[CLASSIFICATION] or bool(raw.get("label_names"))
    if regression != classification:  # both: the definition contradicts itself, and its checks say how
        return REGRESSION if regression else CLASSIFICATION
    return None


def _score_range(value, problem_type: str, problem) -> tuple[float, float] | None:
    """``score_range: [low, high]``: the scale of a regression task's scores (STS-B: [0, 5])."""
    if value is None:
        return None
    if problem_type != REGRESSION:
        problem("score_range", f"only a regression task has a score scale; this one is {problem_type}")
        return None
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, (int, float)) and not isinstance(
            v, bool) and math.isfinite(v) for v in value) or value[0] >= value[1]):
        problem("score_range", f"must be [low, high] with low < high, got {value!r}")
        return None
    return float(value[0]), float(value[1])


def _name(raw: Mapping[str, Any], reserved: Collection[str], problem) -> str:
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        problem("name", f"must be a short name (letters, digits, '_', '-', '.'; at most 64), got {name!r}")
        return str(name)
    if name.lower() in reserved or name.lower().replace("-", "") in reserved:
        problem("name", f"{name!r} is the name of a shipped task: give your task another name (or use the shipped "
                        f"task by its name alone)")
    return name


def _strings(value, key: str, problem, most: int | None = None) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, int, float, bool)) for v in value):
        problem(key, f"must be a list of names, got {value!r}")
        return ()
    if most is not None and len(value) > most:
        problem(key, f"at most {most} (one text or a pair), got {list(value)}")
    return tuple(label_text(v) for v in value)


def _examples(value, problem) -> dict[str, int]:
    if not isinstance(value, Mapping) or set(value) - set(SPLITS) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values()):
        problem("examples", f"must map train/validation to positive counts, got {value!r}")
        return {}
    return dict(value)


__all__ = ["KEYS", "load_task_file", "looks_like_definition_path",
           "task_from_mapping"]
