"""Loading and tokenising a task's data with ``datasets``.

Source order: an explicit data directory, else ``$GLUE_DIR``, else the Hugging Face hub. A data directory is the
standard GLUE layout (``SST-2/train.tsv``, ``SST-5/train.txt`` PTB trees, ``SQuAD/train-v1.1.json``, ...). TSVs are
read with quoting disabled (several GLUE files hold stray ``"``), MRPC's byte-order mark is dropped, CoLA has no
header, and every malformed row is reported with its file and line number.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

from istar_tune.errors import ConfigError, DataError
from istar_tune.tasks import EXTRACTIVE_QA, REGRESSION, Task

GLUE_DIR_ENV = "GLUE_DIR"
SPLITS = ("train", "validation")
MAX_ANSWER_TOKENS = 30
N_BEST = 20


def resolve_data_dir(data_dir: str | os.PathLike | None, space_value: str | os.PathLike | None = None) -> Path | None:
    """The data folder, by one rule everywhere: ``data_dir`` (the flag), else ``space_value`` (a search space's
    ``data_dir``), else ``$GLUE_DIR``, else ``None`` (the Hugging Face hub)."""
    for chosen, source in ((data_dir, "--data-dir"), (space_value, "the search space's data_dir"),
                           (os.environ.get(GLUE_DIR_ENV), f"${GLUE_DIR_ENV}")):
        if chosen in (None, ""):
            continue
        path = Path(chosen).expanduser()
        if not path.is_dir():
            raise DataError(f"data directory {str(path)!r} (from {source}) does not exist: point it at a folder in "
                            "the GLUE layout, e.g. ../shared/data/glue")
        return path
    return None


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether the Hugging Face hub answers (False at once when HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set)."""
    import urllib.error
    import urllib.request

    if any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    try:
        urllib.request.urlopen(urllib.request.Request("https://huggingface.co", method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False
    return True


def task_files(task: Task, data_dir: Path) -> dict[str, Path]:
    """The task's split files in ``data_dir``; a clear error naming what is missing."""
    folder = data_dir / task.display_name
    files = {split: folder / name for split, name in task.files.items()}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise DataError(f"{task.display_name} files not found: {', '.join(missing)}; the data directory must hold "
                        f"{task.display_name}/{task.files['train']} and {task.display_name}/{task.files['validation']}"
                        " (the standard GLUE layout)")
    return files


# --------------------------------------------------------------------------------------------------- parsing


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A data file's text; a file that is not UTF-8 is reported with its line and the offending byte."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); "
                        "save the file as UTF-8") from None


def parse_file(task: Task, path: Path) -> dict[str, list]:
    """One split file of ``task`` parsed into columns (the parser of its format)."""
    return _PARSERS[task.file_format](task, path)


def _label_value(task: Task, raw: str, where: str):
    raw = raw.strip()
    if task.problem_type == REGRESSION:
        try:
            value = float(raw)
        except ValueError:
            raise DataError(f"{where}: score {raw!r} is not a number") from None
        if not math.isfinite(value):
            raise DataError(f"{where}: score {raw!r} is not a finite number")
        return value
    if raw.isdigit() and int(raw) < len(task.label_names):
        return int(raw)
    if raw in task.label_names:
        return task.label_names.index(raw)
    raise DataError(f"{where}: label {raw!r} is not one of {', '.join(task.label_names)} "
                    f"(or 0..{len(task.label_names) - 1})")


def parse_tsv(task: Task, path: Path) -> dict[str, list]:
    """Read one GLUE TSV into columns ``task.text_fields + ('label',)``."""
    lines = read_text(path, "utf-8-sig").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    start = 1 if task.header else 0
    if task.header:
        if not lines:
            raise DataError(f"{path}: the file is empty; expected a header row")
        header = lines[0].rstrip("\r").split("\t")
        missing = [c for c in task.columns.values() if isinstance(c, str) and c not in header]
        if missing:
            raise DataError(f"{path}: header lacks column(s) {', '.join(missing)}; found {', '.join(header)}")
        index = {name: header.index(col) for name, col in task.columns.items()}
    else:
        index = dict(task.columns)
    columns: dict[str, list] = {name: [] for name in (*task.text_fields, "label")}
    for number, line in enumerate(lines[start:], start=start + 1):
        fields = line.rstrip("\r").split("\t")
        where = f"{path}:{number}"
        if len(fields) != task.num_columns:
            raise DataError(f"{where}: expected {task.num_columns} tab-separated columns, found {len(fields)}")
        for name in task.text_fields:
            columns[name].append(fields[index[name]])
        columns["label"].append(_label_value(task, fields[index["label"]], where))
    if not columns["label"]:
        raise DataError(f"{path}: no data rows")
    return columns


_PTB_ROOT = re.compile(r"^\((\d)\s")
_PTB_LEAF = re.compile(r"\(\d ([^()\s]+)\)")


def parse_ptb(task: Task, path: Path) -> dict[str, list]:
    """Stanford sentiment treebank lines: the root's label is the sentence label, the leaves its words."""
    sentences, labels = [], []
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        root, leaves = _PTB_ROOT.match(line), _PTB_LEAF.findall(line)
        if root is None or not leaves or line.count("(") != line.count(")"):
            raise DataError(f"{path}:{number}: not a labelled PTB tree such as '(3 (2 It) (4 works))'")
        labels.append(_label_value(task, root.group(1), f"{path}:{number}"))
        sentences.append(" ".join(leaves))
    if not labels:
        raise DataError(f"{path}: no trees")
    return {task.text_fields[0]: sentences, "label": labels}


def parse_squad(task: Task, path: Path) -> dict[str, list]:
    """SQuAD v1.1 JSON flattened to one row per question with ``answers = {text: [...], answer_start: [...]}``."""
    try:
        try:
            articles = json.loads(read_text(path))["data"]
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
                                            "answer_start": [int(a["answer_start"]) for a in qa["answers"]]})
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"{path}: not a SQuAD v1.1 file ({type(err).__name__}: {err})") from None
    if not rows["id"]:
        raise DataError(f"{path}: no questions")
    return rows


_PARSERS = {"tsv": parse_tsv, "ptb": parse_ptb, "squad": parse_squad}


def load_raw(task: Task, data_dir: str | os.PathLike | None = None, max_train_samples: int | None = None,
             max_eval_samples: int | None = None) -> datasets.DatasetDict:
    """The task's train and validation splits as a ``DatasetDict`` (the first N rows of each when limited)."""
    root = resolve_data_dir(data_dir)
    if root is not None:
        files = task_files(task, root)
        splits = {split: datasets.Dataset.from_dict(_PARSERS[task.file_format](task, files[split]))
                  for split in SPLITS}
    else:
        splits = _load_from_hub(task)
    limits = {"train": max_train_samples, "validation": max_eval_samples}
    for split, limit in limits.items():
        if limit is not None and limit < len(splits[split]):
            splits[split] = splits[split].select(range(limit))
    return datasets.DatasetDict(splits)


def _load_from_hub(task: Task) -> dict[str, datasets.Dataset]:
    dataset_id, config = task.hub
    try:
        loaded = datasets.load_dataset(dataset_id, config)
    except Exception as err:  # noqa: BLE001 — any hub failure becomes one actionable line
        raise DataError(f"cannot load {task.display_name} from the Hugging Face hub ({dataset_id}): "
                        f"{type(err).__name__}; pass --data-dir DIR or set {GLUE_DIR_ENV} to a folder in the GLUE "
                        "layout") from None
    splits = {}
    for split in SPLITS:
        data = loaded[task.hub_splits[split]]
        for hub_name, ours in task.hub_columns.items():
            data = data.rename_column(hub_name, ours)
        splits[split] = data
    return splits


# ------------------------------------------------------------------------------------------------ tokenising


@dataclass
class EncodedData:
    """Tokenised splits ready for a ``DataLoader``, plus what SQuAD post-processing needs."""

    train: datasets.Dataset
    validation: datasets.Dataset
    raw_validation: datasets.Dataset
    eval_offsets: list | None = None
    """SQuAD: per validation feature, the character span of each token (``None`` outside the context)."""
    eval_example_ids: list | None = None
    """SQuAD: per validation feature, the id of the question it came from."""
    holdout: datasets.Dataset | None = None
    """Training examples held out to choose the scored epoch (the ``holdout`` setting; see :func:`hold_out`)."""

    @property
    def labels(self) -> np.ndarray | None:
        return None if "labels" not in self.validation.column_names else np.asarray(self.validation["labels"])


def hold_out(data: EncodedData, share: float, seed: int) -> EncodedData:
    """``data`` with a seeded random ``share`` (rounded up) of its training examples moved to ``holdout``
    (IsoLayer's paper chooses the epoch on a 70/30 train/validation split of the training data, and reports the dev
    set)."""
    if data.eval_offsets is not None:
        raise ConfigError("holdout applies to sentence-level tasks; SQuAD's training windows are not examples")
    held = math.ceil(len(data.train) * share)  # as datasets' train_test_split counts it
    if len(data.train) - held < 1:
        raise ConfigError(f"holdout {share} of {len(data.train)} training examples leaves one side empty: use more "
                          "training examples or another share")
    split = data.train.train_test_split(test_size=share, seed=int(seed) % 2**32, shuffle=True)
    return dataclasses.replace(data, train=split["train"], holdout=split["test"])


def encode(task: Task, raw: datasets.DatasetDict, tokenizer, max_length: int = 128, squad_window: int | None = None,
           squad_stride: int | None = None) -> EncodedData:
    """Tokenise once with ``datasets.map(batched=True)``; padding is left to the collator (dynamic). SQuAD contexts
    are split into windows of ``squad_window`` tokens (default ``max_length``) overlapping by ``squad_stride``
    (default a quarter of the window)."""
    if task.problem_type == EXTRACTIVE_QA:
        window = squad_window or max_length
        return _encode_squad(raw, tokenizer, window, squad_stride or squad_doc_stride(window))

    def tokenize(batch):
        encoded = tokenizer(*[batch[f] for f in task.text_fields], truncation=True, max_length=max_length)
        encoded["labels"] = batch["label"]
        return encoded

    splits = {split: raw[split].map(tokenize, batched=True, remove_columns=raw[split].column_names,
                                    desc=f"Tokenising {task.display_name} {split}") for split in SPLITS}
    return EncodedData(train=splits["train"], validation=splits["validation"], raw_validation=raw["validation"])


def squad_doc_stride(max_length: int) -> int:
    """Overlap between the windows of a long SQuAD context: a quarter of the window (128 at 512)."""
    return max(8, max_length // 4)


def _encode_squad(raw: datasets.DatasetDict, tokenizer, max_length: int, stride: int) -> EncodedData:
    pad_right = tokenizer.padding_side == "right"

    def windows(batch):
        questions = [q.lstrip() for q in batch["question"]]
        first, second = (questions, batch["context"]) if pad_right else (batch["context"], questions)
        return tokenizer(first, second, truncation="only_second" if pad_right else "only_first",
                         max_length=max_length, stride=stride, return_overflowing_tokens=True,
                         return_offsets_mapping=True)

    def train_features(batch):
        encoded = windows(batch)
        sample_map = encoded.pop("overflow_to_sample_mapping")
        offsets = encoded.pop("offset_mapping")
        starts, ends = [], []
        for i, offset in enumerate(offsets):
            sequence_ids = encoded.sequence_ids(i)
            cls_index = encoded["input_ids"][i].index(tokenizer.cls_token_id) if tokenizer.cls_token_id in \
                encoded["input_ids"][i] else 0
            answers = batch["answers"][sample_map[i]]
            context_id = 1 if pad_right else 0
            token_start = sequence_ids.index(context_id)
            token_end = len(sequence_ids) - 1 - sequence_ids[::-1].index(context_id)
            if not answers["answer_start"]:
                starts.append(cls_index)
                ends.append(cls_index)
                continue
            char_start = answers["answer_start"][0]
            char_end = char_start + len(answers["text"][0])
            if offset[token_start][0] > char_start or offset[token_end][1] < char_end:
                starts.append(cls_index)  # the answer is outside this window
                ends.append(cls_index)
                continue
            while token_start < len(offset) and offset[token_start][0] <= char_start:
                token_start += 1
            while offset[token_end][1] >= char_end:
                token_end -= 1
            starts.append(token_start - 1)
            ends.append(token_end + 1)
        encoded["start_positions"], encoded["end_positions"] = starts, ends
        return encoded

    def eval_features(batch):
        encoded = windows(batch)
        sample_map = encoded.pop("overflow_to_sample_mapping")
        context_id = 1 if pad_right else 0
        encoded["example_id"] = [batch["id"][s] for s in sample_map]
        encoded["offset_mapping"] = [
            [o if encoded.sequence_ids(i)[k] == context_id else None for k, o in enumerate(offsets)]
            for i, offsets in enumerate(encoded["offset_mapping"])
        ]
        return encoded

    train = raw["train"].map(train_features, batched=True, remove_columns=raw["train"].column_names,
                             desc="Tokenising SQuAD train")
    validation = raw["validation"].map(eval_features, batched=True, remove_columns=raw["validation"].column_names,
                                       desc="Tokenising SQuAD validation")
    offsets, example_ids = validation["offset_mapping"], validation["example_id"]
    validation = validation.remove_columns(["offset_mapping", "example_id"])
    return EncodedData(train=train, validation=validation, raw_validation=raw["validation"], eval_offsets=offsets,
                       eval_example_ids=example_ids)


def squad_predictions(encoded: EncodedData, start_logits: np.ndarray, end_logits: np.ndarray) -> dict[str, str]:
    """Answer text per question: the best valid span (start ≤ end, at most 30 tokens, inside the context) over
    the question's windows, scored by start + end logit, as the standard SQuAD post-processing does."""
    contexts = dict(zip(encoded.raw_validation["id"], encoded.raw_validation["context"]))
    best: dict[str, tuple[float, str]] = {}
    for feature, example_id in enumerate(encoded.eval_example_ids):
        offsets = encoded.eval_offsets[feature]
        starts, ends = start_logits[feature], end_logits[feature]
        length = min(len(offsets), len(starts))
        start_top = np.argsort(starts[:length])[::-1][:N_BEST]
        end_top = np.argsort(ends[:length])[::-1][:N_BEST]
        for s in start_top:
            if offsets[s] is None:
                continue
            for e in end_top:
                if offsets[e] is None or e < s or e - s + 1 > MAX_ANSWER_TOKENS:
                    continue
                score = float(starts[s] + ends[e])
                if example_id not in best or score > best[example_id][0]:
                    best[example_id] = (score, contexts[example_id][offsets[s][0]:offsets[e][1]])
    return {qid: text for qid, (_, text) in best.items()}


def squad_references(encoded: EncodedData) -> dict[str, list[str]]:
    return {row["id"]: row["answers"]["text"] for row in encoded.raw_validation}
