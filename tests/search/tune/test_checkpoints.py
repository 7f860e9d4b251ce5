"""A trial's checkpoints in storage: older ones pruned, and a resume falls back to the newest readable one."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pyarrow.fs
import pytest

from istar_tune.search.tune import checkpoints


@pytest.fixture
def trial_folder(tmp_path, monkeypatch):
    """A trial folder with checkpoints 0..3 (each holding its index), seen as the trial's Tune storage."""
    for index in range(4):
        folder = tmp_path / f"checkpoint_{index:06d}"
        folder.mkdir()
        (folder / "epoch").write_text(str(index))
    (tmp_path / "result.json").write_text("{}")
    storage = SimpleNamespace(trial_fs_path=str(tmp_path), storage_filesystem=pyarrow.fs.LocalFileSystem())
    monkeypatch.setattr(checkpoints, "_storage", lambda: storage)
    return tmp_path


def _given(folder: Path):
    @contextlib.contextmanager
    def as_directory():
        yield str(folder)

    return SimpleNamespace(path=str(folder), as_directory=as_directory)


def _read(folder: Path) -> int:
    return int((folder / "epoch").read_text())


def test_prune_keeps_the_newest_checkpoints(trial_folder):
    checkpoints.prune(2)
    assert sorted(p.name for p in trial_folder.iterdir()) == ["checkpoint_000002", "checkpoint_000003", "result.json"]


def test_restore_reads_the_given_checkpoint_else_the_newest_readable_other(trial_folder):
    assert checkpoints.restore(_given(trial_folder / "checkpoint_000003"), _read) == (3, "")
    (trial_folder / "checkpoint_000003" / "epoch").write_text("truncated")
    value, note = checkpoints.restore(_given(trial_folder / "checkpoint_000003"), _read)
    assert value == 2 and note.startswith("resumed from checkpoint_000002 because checkpoint_000003: ValueError")


def test_with_nothing_readable_the_trial_starts_over_and_says_why(trial_folder):
    for folder in trial_folder.glob("checkpoint_*"):
        (folder / "epoch").write_text("bad")
    value, note = checkpoints.restore(_given(trial_folder / "checkpoint_000003"), _read)
    assert value is None and note.startswith("no readable checkpoint: started over")


def test_outside_a_trial_pruning_never_fails_and_no_checkpoint_means_a_fresh_start(monkeypatch):
    monkeypatch.setattr(checkpoints, "_storage", lambda: (_ for _ in ()).throw(RuntimeError("not in a trial")))
    checkpoints.prune(1)  # logs, does not raise
    assert checkpoints.restore(None, _read) == (None, "")
