"""Reading a task's train and validation splits, whatever their source, into one shape: the task's text fields and
``label`` (a class id or a score; QA: ``id``, ``question``, ``context``, ``answers``).

A task's files are read by their format's record (:mod:`istar_tune.data.registry`: its checks of both splits' files,
then its reader), a hub data set by :mod:`istar_tune.data.hub`; one file with ``validation_split`` is read once and
split, seeded and class-stratified (:mod:`istar_tune.data.split`). Every table then takes the one checker
(:mod:`istar_tune.data.checking`), and reading a definition *resolves* it: its class names, split sizes and file
checksums become part of it, so a trial on another node reads exactly the files the search was planned on.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import datasets

from istar_tune.data import registry
from istar_tune.data.checking import cut_problems, normalise, where_of
from istar_tune.data.format import Source, table
from istar_tune.data.hub import read_hub
from istar_tune.data.split import by_column, split_off
from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks.data_folder import GLUE_DIR_ENV, resolve_data_dir
from istar_tune.tasks.task import CLASSIFICATION, IN_DATA_FOLDER, SPLITS, Task


def load_raw(task: Task, data_dir: str | Path | None = None, max_train_samples: int | None = None,
             max_eval_samples: int | None = None, trains: bool = True) -> datasets.DatasetDict:
    """The task's train and validation splits as a ``DatasetDict`` (the first N rows of each when limited;
    ``trains=False``: nothing trains on the training split, whose cut is then not checked)."""
    return read_task(task, data_dir, max_train_samples, max_eval_samples, trains)[1]


def resolve(task: Task, data_dir: str | Path | None = None) -> Task:
    """``task`` with what its data says (class names, split sizes, checksums); raises one :class:`ConfigError`
    listing every problem of its data."""
    return read_task(task, data_dir)[0]


def read_task(task: Task, data_dir: str | Path | None = None, max_train_samples: int | None = None,
              max_eval_samples: int | None = None, trains: bool = True) -> tuple[Task, datasets.DatasetDict]:
    """The resolved task and its splits: limited to the first N rows after every check of the whole split, and what
    a limit leaves checked again (an empty split, one training class, a constant score)."""
    files = task_files(task, data_dir)
    if files is None:
        loaded, checksums = read_hub(task), {s: "hub" for s in SPLITS}
    else:
        loaded = _from_files(task, files)
        if task.split_field:  # the authors' split, one column: each row to the split its value names
            loaded, left_out = by_column(task, loaded["train"], where_of(task, files)["train"])
            task = replace(task, left_out=left_out)
        digests = {str(p): file_checksum(p) for p in {str(p): p for p in files.values()}.values()}
        checksums = {s: digests[str(p)] for s, p in files.items()}  # one file as both splits: hashed once
    named = where_of(task, files)
    problems = [f"{task.source}: {split} file {named[split] if files else ''}: changed since the task was resolved "
                f"({task.checksums[split]}, now {checksums[split]}): restore the file, or plan the search again"
                for split in SPLITS if task.checksums.get(split, checksums[split]) != checksums[split]
                and checksums[split] != "hub"]
    # One path: every format's table (files, the GLUE layout's parsers, the hub) takes the same checks.
    resolved, splits = normalise(task, loaded, files, problems)
    if task.validation_split and not problems:  # one file: checked whole (its rows named as the file has them)
        resolved, splits, cut = split_off(resolved, splits["train"])
        problems += cut_problems(resolved, splits, where_of(task, files), cut)
    if not task.shipped:  # the files' counts, not a definition's word, size the cost model
        problems += [f"{task.source}: examples: {split} {given:,}, but the data holds {len(splits[split]):,}: leave "
                     "examples out (the data is counted) or fix it" for split, given in
                     (("train", task.train_examples), ("validation", task.eval_examples))
                     if given and given != len(splits[split])]
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))  # one file as both splits: each problem once
    resolved = replace(resolved, checksums={**resolved.checksums, **{s: c for s, c in checksums.items()
                                                                       if c != "hub"}})
    # Sizes a definition gives stay (the paper's tasks give the published ones; the data read may be a subset).
    resolved = replace(resolved, train_examples=task.train_examples or len(splits["train"]),
                       eval_examples=task.eval_examples or len(splits["validation"]),
                       read_examples=(len(splits["train"]), len(splits["validation"])), leaked=leaked(splits))
    resolved, splits = _limited(resolved, task, files, splits, max_train_samples, max_eval_samples, trains)
    return resolved, datasets.DatasetDict(splits)


def _limited(resolved: Task, task: Task, files, splits: dict, max_train_samples: int | None,
             max_eval_samples: int | None, trains: bool) -> tuple[Task, dict]:
    """The first N rows of each split, and every check the whole split passed again on what the limits leave; the
    task then says the cut: the rows kept, and (classification) each class's training examples among them."""
    cut, whole = {}, (len(splits["train"]), len(splits["validation"]))
    names = {"train": f"max_train_samples {max_train_samples}", "validation": f"max_eval_samples {max_eval_samples}"}
    for split, limit in (("train", max_train_samples), ("validation", max_eval_samples)):
        if limit is not None and limit < len(splits[split]):
            splits[split] = splits[split].select(range(limit))
            if trains or split != "train":
                cut[split] = splits[split]
    if cut:
        problems = [p for split, data in cut.items() for p in cut_problems(
            resolved, {split: data}, where_of(task, files), f"the first {len(data):,} rows ({names[split]})")]
        if problems:
            raise ConfigError(problems)
        said = ", ".join(names[split] for split in ("train", "validation") if split in cut)
        counts = resolved.class_counts
        if resolved.problem_type == CLASSIFICATION and "train" in cut:
            kept = Counter(splits["train"]["label"])
            counts = tuple(kept[i] for i in range(len(resolved.label_names)))
        resolved = replace(resolved, read_examples=(len(splits["train"]), len(splits["validation"])),
                           class_counts=counts, cut=f"the first rows of {whole[0]:,} / {whole[1]:,}: {said}")
    return resolved, splits


def leaked(splits: dict) -> int:
    """Validation rows whose input (every text field, the question and context of QA) is a training row's too: a
    score on them measures memory, not generalisation (the task's line counts them)."""
    fields = [name for name in splits["validation"].column_names if name not in ("label", "id", "answers")]
    seen = set(zip(*(splits["train"][name] for name in fields)))
    return sum(row in seen for row in zip(*(splits["validation"][name] for name in fields)))


def task_files(task: Task, data_dir: str | Path | None) -> dict[str, Source] | None:
    """The task's split files (``None``: it is read from the hub; one file with ``validation_split``: both splits
    name it); a clear error naming what is missing."""
    if task.files_in == IN_DATA_FOLDER:
        root = resolve_data_dir(data_dir)
        if root is None:
            if task.hub is None:
                raise DataError(f"{task.source}: task {task.name} reads its files from the data folder: give "
                                f"--data-dir DIR or set {GLUE_DIR_ENV}")
            return None
        files = {split: [root / part for part in name] if isinstance(name, list) else root / name
                 for split, name in task.files.items()}
        if task.validation_split or task.split_field:
            files["validation"] = files["train"]
        missing = [str(path) for source in files.values() for path in (source if isinstance(source, list) else [source])
                   if not path.is_file()]
        if missing:
            raise DataError(f"{task.display_name} files not found: {', '.join(missing)}; the data directory must hold "
                            f"{' and '.join(map(str, task.files.values()))} (the standard GLUE layout)")
        return files
    if not task.files:
        return None
    files = {split: ({field: Path(p) for field, p in given.items()} if isinstance(given, dict) else
                     [Path(p) for p in given] if isinstance(given, list) else Path(given))
             for split, given in task.files.items()}
    if task.validation_split or task.split_field:
        files["validation"] = files["train"]
    paths = {f"{split} file {str(path)!r}": path for split, source in files.items()
             for path in (source.values() if isinstance(source, dict) else
                          source if isinstance(source, list) else [source])}
    missing = [what for what, path in paths.items() if not path.is_file()]
    if missing:
        raise DataError(f"{task.source}: {' and '.join(dict.fromkeys(missing))} of task {task.name} do(es) not exist")
    return files


def file_checksum(source: Source) -> str:
    """``sha256:<hex>`` of a split's file (parallel files: of each file's digest, by field; a split's parts: of each
    part's digest, in order)."""
    if isinstance(source, (dict, list)):
        named = source.items() if isinstance(source, dict) else enumerate(source)
        digests = "".join(f"{field}:{file_checksum(path)}\n" for field, path in named)
        return f"sha256:{hashlib.sha256(digests.encode()).hexdigest()}"
    digest = hashlib.sha256()
    with open(source, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _from_files(task: Task, files: dict[str, Source]) -> dict[str, datasets.Dataset]:
    """Each split by its format's reader, after the format's checks of both splits' files; a file that is both
    splits is read once."""
    fmt = registry.get(task.format)
    if fmt.check is not None:
        for pair in _pairs(files):  # each part against the other split's first (their headers agree)
            fmt.check(task, pair)
    splits: dict[str, datasets.Dataset] = {}
    for split in SPLITS:
        same = next((s for s in splits if files[s] == files[split]), None)
        if same is not None:
            splits[split] = splits[same]
            continue
        parts = files[split] if isinstance(files[split], list) else [files[split]]
        read = [fmt.read(task, part) for part in parts]
        tables = [one if isinstance(one, datasets.Dataset) else table(one, part) for one, part in zip(read, parts)]
        splits[split] = tables[0] if len(tables) == 1 else joined(tables, parts)
    return splits


def _pairs(files: dict[str, Source | list]) -> list[dict[str, Source]]:
    """Both splits' files as a format's check takes them: one pair, or (a split given in parts) each part beside the
    other split's first part."""
    first = {split: source[0] if isinstance(source, list) else source for split, source in files.items()}
    pairs = [first]
    for split, source in files.items():
        for part in (source[1:] if isinstance(source, list) else []):
            pairs.append({**first, split: part})
    return pairs


def joined(tables: list[datasets.Dataset], parts: list[Path]) -> datasets.Dataset:
    """A split's parts as one table, in the order given; parts whose fields differ are refused naming both."""
    fields = tables[0].column_names
    for data, part in zip(tables[1:], parts[1:]):
        if sorted(data.column_names) != sorted(fields):
            raise DataError(f"{part}: fields {', '.join(data.column_names)}, but {parts[0]} has "
                            f"{', '.join(fields)}: a split's files hold the same fields")
    try:
        return datasets.concatenate_datasets([data.select_columns(fields) for data in tables])
    except (ValueError, TypeError) as err:  # a field read as text in one part and numbers in another
        kinds = "; ".join(f"{part}: {', '.join(f'{k} {v}' for k, v in data.features.items())}"
                          for data, part in zip(tables, parts))
        text = " ".join(str(err).split())[:120]
        raise DataError(f"a split's files read their fields as different kinds ({kinds}): write each field one way "
                        f"in every file ({text})") from None
