"""Fixtures of the search tests that run real searches from the command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _maker(glue: Path, folder: Path, space_yaml):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env = {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1", "GLUE_DIR": str(glue)}

    def make(name: str, epochs: int | list[int], rates: list[str], concurrency: int, share: bool = True):
        space = folder / f"{name}.yaml"
        paper = isinstance(epochs, list)
        space.write_text(space_yaml(
            name=name, concurrency=concurrency, search={"share_epochs": share},
            hyperparameters={"epochs": {"grid": epochs} if paper else epochs,
                             "learning_rate": {"grid": [float(rate) for rate in rates]}},
            settings={"max_train_samples": 640, "max_eval_samples": 64, "recipe": "paper" if paper else None}))
        return space, env

    return make


@pytest.fixture
def real_search(glue, tmp_path, space_yaml):
    """``real_search(name, epochs, rates, concurrency, share=True)``: (space file, environment) of a search of real
    tiny-bert trials on 640 SST-2 examples (a few seconds an epoch), one trial per learning rate, run by
    ``istar-tune`` in a subprocess with a local Ray instance. ``epochs`` a list: a grid of epoch counts under
    ``recipe: paper``, whose configurations share a trial per learning rate (unless ``share`` is false)."""
    return _maker(glue, tmp_path, space_yaml)


@pytest.fixture(scope="module")
def real_search_for_module(glue, tmp_path_factory, space_yaml):
    """:func:`real_search` for a module's searches whose results several of its tests compare with."""
    return _maker(glue, tmp_path_factory.mktemp("searches"), space_yaml)
