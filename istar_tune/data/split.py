"""One file as both splits (``validation_split``): the validation rows drawn from it by a seed, class-stratified for
a classification (each class keeps its share, by ``datasets``' own stratified split), at random otherwise. The file is
checked whole first, so a refusal names its rows as the file holds them; what the split leaves is checked again."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from istar_tune.errors import ConfigError
from istar_tune.tasks.task import CLASSIFICATION, REGRESSION, Task


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
    labels = splits["train"]["label"]
    if task.problem_type == CLASSIFICATION:
        counts = Counter(labels)
        task = replace(task, class_counts=tuple(counts[i] for i in range(len(task.label_names))))
    elif task.problem_type == REGRESSION and labels:
        task = replace(task, observed_scores=(min(labels), max(labels)))
    return replace(task, dropped=(task.dropped[0], 0)), splits, how
