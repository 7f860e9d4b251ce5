"""A task as a mapping, the other way: the definition a resolved task rebuilds from anywhere (a trial's
configuration, an export, the search's MLflow artifact), and the facts a reader of MLflow needs of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from istar_tune.tasks.task import DEFAULT_ENCODING, IN_DEFINITION_FOLDER, Task


def definition_mapping(task: Task) -> dict[str, Any]:
    """``task`` as a definition mapping (absolute paths, what resolution read): it rebuilds the same task with
    :func:`task_from_mapping` anywhere, without the original file or working folder."""
    mapping: dict[str, Any] = {"name": task.name, "display_name": task.display_name,
                               "problem_type": task.problem_type, "metric": task.metric}
    if task.files:
        mapping.update({**task.files, "format": task.format})
        if task.validation_split:
            share = task.validation_split
            mapping.update({"validation_split": int(share) if share >= 1 else share, "split_seed": task.split_seed})
        if task.split_field:
            mapping.update({"split_field": task.split_field,
                            "split_values": {split: list(values) for split, values in task.split_values.items()}})
        if task.files_in != IN_DEFINITION_FOLDER:
            mapping["files_in"] = task.files_in
    if task.hub is not None:
        hub = task.hub
        mapping["hub"] = {"path": hub.path, "name": hub.name, "train_split": hub.train_split,
                          "validation_split": hub.validation_split, **({"columns": hub.columns} if hub.columns else {})}
    if task.glue is not None:
        mapping["glue"] = {"header": task.glue.header, "num_columns": task.glue.num_columns,
                           "columns": dict(task.glue.columns)}
    mapping.update({"text_fields": list(task.text_fields), "label_field": task.label_field})
    if task.encoding != DEFAULT_ENCODING:
        mapping["encoding"] = task.encoding
    if task.label_values:
        mapping["label_names"] = dict(zip(task.label_values, task.label_names))
    elif task.label_names:
        mapping["label_names"] = list(task.label_names)
    if task.drop_labels:
        mapping["drop_labels"] = list(task.drop_labels)
    if task.column_names:
        mapping["column_names"] = list(task.column_names)
    if task.separator:
        mapping["separator"] = task.separator
    if task.unanswerable:
        mapping["unanswerable"] = True
    if task.positive_label:
        mapping["positive_label"] = task.positive_label
    if task.score_range is not None:
        mapping["score_range"] = list(task.score_range)
    if task.train_examples and task.eval_examples:
        mapping["examples"] = {"train": task.train_examples, "validation": task.eval_examples}
    if task.checksums:
        mapping["checksums"] = dict(task.checksums)
    return mapping


def facts(task: Task) -> dict[str, Any]:
    """What a reader of MLflow needs of a task it has no definition of: its name, how it is shown and ranked, and
    its split sizes (the replay's cost model)."""
    sizes = ({"examples": {"train": task.train_examples, "validation": task.eval_examples}}
             if task.train_examples and task.eval_examples else {})
    return {"name": task.name, "display_name": task.display_name, "problem_type": task.problem_type,
            "metric": task.metric, **({"positive_label": task.positive_label} if task.positive_label else {}),
            **sizes}


def task_from_facts(values: Mapping[str, Any], source: str) -> Task:
    """The task of :func:`facts`, for tables, plots and the replay's cost model (no data: it cannot be trained); from
    a whole :func:`definition_mapping` (a checkpoint's) also its head and inputs: class names in label-id order, the
    text fields, whether QA questions may be unanswerable, a regression's scale. Its files are not read, nor need to
    exist still (a model logged from a checkpoint after its data moved)."""
    sizes = values.get("examples") or {}
    names = values.get("label_names") or ()
    label_values = tuple(str(v) for v in names) if isinstance(names, Mapping) else ()
    scale = values.get("score_range")
    return Task(name=values["name"], display_name=values.get("display_name", values["name"]),
                problem_type=values["problem_type"], metric=values["metric"], source=source,
                positive_label=values.get("positive_label", ""), train_examples=int(sizes.get("train", 0)),
                eval_examples=int(sizes.get("validation", 0)),
                label_names=tuple(str(n) for n in (names.values() if isinstance(names, Mapping) else names)),
                label_values=label_values, unanswerable=bool(values.get("unanswerable", False)),
                text_fields=tuple(values.get("text_fields") or ()),
                score_range=(float(scale[0]), float(scale[1])) if scale else None)
