"""One file as both splits: the validation rows drawn from it by a seed (``validation_split``), class-stratified for
a classification (each class keeps its share, by ``datasets``' own stratified split), at random otherwise: the file is
checked whole first, so a refusal names its rows as the file holds them, and what the split leaves is checked again.
Or the authors' own split, a column naming each row's (``split_field``): each split is its rows, checked as a split
(a refusal's rows counted within it), and rows of other splits (test) left out and counted."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from istar_tune.data.rows import MAX_ROWS_SHOWN
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks.task import CLASSIFICATION, REGRESSION, SPLITS, Task
from istar_tune.tasks.values import excerpt, label_text


def split_off(task: Task, whole):
    """``(task, {train, validation}, how)``: the two splits of one checked table, the task with what the training
    split holds (its class counts, its scores' range; the file's dropped rows counted once), and the words a refusal
    names the split by."""
    import datasets

    share, seed = task.validation_split, task.split_seed
    how = f"validation_split {share:g} (split_seed {seed})"
    count = round(share) if share >= 1 else None
    if count is not None and count >= len(whole):
        raise ConfigError(f"{task.source}: {how}: {count:,} validation rows of the {len(whole):,} the file holds leave "
                          "no training row: give a smaller count or a share below 1")
    options = {"test_size": count if count is not None else share, "seed": seed, "shuffle": True}
    data = whole
    if task.problem_type == CLASSIFICATION:
        counts = Counter(whole["label"])
        alone = sorted(task.label_names[c] for c, n in counts.items() if n < 2)
        if alone:
            raise ConfigError(f"{task.source}: {how}: class(es) {', '.join(map(repr, alone))} have one example: a "
                              "stratified split keeps two of each (one each side): add examples, drop the class, or "
                              "give a validation file")
        data = whole.cast_column("label", datasets.ClassLabel(names=list(task.label_names)))
        options["stratify_by_column"] = "label"
    try:
        parts = data.train_test_split(**options)
    except ValueError as err:  # datasets' own words: a share too small to hold a row of each class
        raise ConfigError(f"{task.source}: {how}: {' '.join(str(err).split())}: give a larger share") from None
    features = whole.features
    splits = {"train": parts["train"].cast(features), "validation": parts["test"].cast(features)}
    labels = splits["train"]["label"] if "label" in splits["train"].column_names else []  # QA: answers instead
    if task.problem_type == CLASSIFICATION:
        counts = Counter(labels)
        task = replace(task, class_counts=tuple(counts[i] for i in range(len(task.label_names))))
    elif task.problem_type == REGRESSION and labels:
        task = replace(task, observed_scores=(min(labels), max(labels)))
    return replace(task, dropped=(task.dropped[0], 0)), splits, how


def by_column(task: Task, whole, where: str) -> tuple[dict, tuple[tuple[str, int], ...]]:
    """``({train, validation}, left out)``: the rows of one table whose ``split_field`` value names each split (by
    ``split_values``), the column itself removed, and each other value with its count of rows left out."""
    if task.split_field not in whole.column_names:
        raise DataError(f"{where}: no field {task.split_field!r} (split_field; its fields: "
                        f"{', '.join(whole.column_names)}): name the column that holds each row's split")
    values = [label_text(v) if v is not None else "" for v in whole[task.split_field]]
    meaning = {value: split for split in SPLITS for value in task.split_values[split]}
    rows: dict[str, list[int]] = {split: [] for split in SPLITS}
    other = Counter()
    for index, value in enumerate(values):
        if value in meaning:
            rows[meaning[value]].append(index)
        else:
            other[value] += 1
    empty = [split for split in SPLITS if not rows[split]]
    if empty:
        seen = ", ".join(f"{excerpt(v)} ({n:,})" for v, n in Counter(values).most_common(MAX_ROWS_SHOWN))
        raise DataError(f"{where}: no row's {task.split_field!r} is {' or '.join(task.split_values[empty[0]])} (the "
                        f"{empty[0]} split; its values: {seen}): name that split's values with split_values: "
                        "{train: [...], validation: [...]}")
    kept = whole.remove_columns(task.split_field)
    return {split: kept.select(rows[split]) for split in SPLITS}, tuple(sorted(other.items()))
