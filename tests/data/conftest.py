"""Fixtures of the data tests: a task's two split files written as a user writes them, and its definition."""

from __future__ import annotations

import pytest

from istar_tune.tasks import task_from_mapping


@pytest.fixture
def split_files():
    """``split_files(folder, header, train_rows, dev_rows, suffix="csv")``: ``train.SUFFIX`` and ``dev.SUFFIX`` in
    ``folder``, each the header line then its rows, UTF-8; the two paths by split."""
    def write(folder, header: str, train: list[str], dev: list[str], suffix: str = "csv") -> dict:
        folder.mkdir(parents=True, exist_ok=True)
        files = {"train": folder / f"train.{suffix}", "validation": folder / f"dev.{suffix}"}
        for split, rows in (("train", train), ("validation", dev)):
            files[split].write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
        return files

    return write


@pytest.fixture
def file_task():
    """``file_task(files, **keys)``: the task a definition of those two files (and any other keys) describes."""
    def make(files: dict, **extra):
        return task_from_mapping({"name": "own", "train": str(files["train"]), "validation": str(files["validation"]),
                                  **extra}, source="own.yaml")

    return make
