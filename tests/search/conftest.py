"""Fixtures of the search tests that run real searches from the command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _maker(glue: Path, folder: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env = {**env, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1", "GLUE_DIR": str(glue)}

    def make(name: str, epochs: int | list[int], rates: list[str], concurrency: int, share: bool = True):
        space = folder / f"{name}.yaml"
        recipe = ""
        if isinstance(epochs, list):
            epochs, recipe = f"{{grid: {epochs}}}", ", recipe: paper"
        space.write_text(f"""\
name: {name}
models: [tiny-bert]
tasks: [sst2]
methods: [base]
hyperparameters:
  batch_size: 16
  epochs: {epochs}
  learning_rate: {{grid: [{', '.join(rates)}]}}
concurrency: {concurrency}
search: {{share_epochs: {str(share).lower()}}}
settings: {{max_length: 32, max_train_samples: 640, max_eval_samples: 64, shrinkage_tokens: 1000{recipe}}}
""")
        return space, env

    return make


@pytest.fixture
def real_search(glue, tmp_path):
    """``real_search(name, epochs, rates, concurrency, share=True)``: (space file, environment) of a search of real
    tiny-bert trials on 640 SST-2 examples (a few seconds an epoch), one trial per learning rate, run by
    ``istar-tune`` in a subprocess with a local Ray instance. ``epochs`` a list: a grid of epoch counts under
    ``recipe: paper``, whose configurations share a trial per learning rate (unless ``share`` is false)."""
    return _maker(glue, tmp_path)


@pytest.fixture(scope="module")
def real_search_for_module(glue, tmp_path_factory):
    """:func:`real_search` for a module's searches whose results several of its tests compare with."""
    return _maker(glue, tmp_path_factory.mktemp("searches"))
