"""The formats by name: a format of one's own is one record and one register call, and a task in it is defined,
read, checked and trained like any other; an extension says its format, a file a format claims is that format."""

from __future__ import annotations

from pathlib import Path

import pytest

from istar_tune.config import Hyperparameters, RunSettings
from istar_tune.data import registry
from istar_tune.data.format import Format
from istar_tune.data.reading import read_task
from istar_tune.data.text_files import read_text
from istar_tune.errors import ConfigError
from istar_tune.tasks import task_from_mapping
from istar_tune.training.loop import train

PREFIX = "__label__"


def read_fasttext(task, path: Path) -> dict[str, list]:
    """fastText's supervised format: ``__label__pos the text`` a line."""
    rows = [line.partition(" ")[::2] for line in read_text(path, task.encoding).splitlines() if line.strip()]
    return {"text": [text for _, text in rows], "label": [label.removeprefix(PREFIX) for label, _ in rows]}


FASTTEXT = Format(name="fasttext", read=read_fasttext, extensions=(".ft",), keys=frozenset({"encoding"}),
                  describes="fastText's supervised lines: __label__NAME then the text")


@pytest.fixture
def fasttext():
    registry.register(FASTTEXT)
    yield FASTTEXT
    del registry.FORMATS[FASTTEXT.name]


def test_a_registered_format_is_defined_read_checked_and_trained(fasttext, tmp_path):
    words = {"pos": ["a fine warm film", "loved every minute", "a joy to watch"],
             "neg": ["a dull long film", "hated every minute", "a chore to sit through"]}
    lines = [f"{PREFIX}{label} {text}" for pair in zip(*[[(k, t) for t in v] for k, v in words.items()])
             for label, text in pair]
    (tmp_path / "train.ft").write_text("\n".join(lines * 4) + "\n")
    (tmp_path / "dev.ft").write_text("\n".join(lines) + "\n")
    task = task_from_mapping({"name": "ft", "train": "train.ft", "validation": "dev.ft"}, tmp_path)
    assert task.format == "fasttext"  # from its extension, as any shipped format
    resolved, splits = read_task(task)
    assert resolved.label_names == ("neg", "pos") and splits["train"]["label"][:2] == [1, 0]
    result = train(Hyperparameters(model="tiny-bert", task="ft", method="base", epochs=1, batch_size=8),
                   RunSettings(max_length=16, progress=False, save_checkpoint=False, output_dir=str(tmp_path / "o")),
                   task=task)
    assert result.best_epoch == 1 and 0.0 <= result.final["accuracy"] <= 1.0
    (tmp_path / "bad.ft").write_text(f"{PREFIX}pos fine\n{PREFIX}\n")  # the checker every format takes
    with pytest.raises(ConfigError, match="bad.ft: rows"):
        read_task(task_from_mapping({"name": "ft2", "train": "bad.ft", "validation": "dev.ft"}, tmp_path))


def test_a_taken_name_is_refused_and_an_unknown_format_names_every_known_one(fasttext, tmp_path):
    with pytest.raises(ValueError, match="format 'csv' is registered already"):
        registry.register(Format(name="csv", read=read_fasttext, describes="another csv"))
    (tmp_path / "t.csv").write_text("text,label\na,1\n")
    with pytest.raises(ConfigError, match="format: must be one of csv, tsv, json, parquet, lines, glue, ptb, squad, "
                                          "fasttext, got 'xlsx'"):
        task_from_mapping({"name": "x", "train": "t.csv", "validation": "t.csv", "format": "xlsx"}, tmp_path)
    assert registry.from_extension(Path("a.JSONL")) == "json" and registry.from_extension(Path("a.doc")) is None
