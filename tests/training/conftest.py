"""Fixtures of the training tests: a tiny-bert run's hyperparameters and settings, and a reporter that records."""

from __future__ import annotations

import shutil

import pytest

from istar_tune.config import Hyperparameters, RunSettings


@pytest.fixture
def make_settings(glue_tiny):
    """``make_settings(**overrides)``: run settings on glue-tiny, short sequences, a small Σ_S budget, no progress
    bars; a recorder's checkpoints hold the full state every epoch (``checkpoint: state``, what these tests read)."""
    def make(**overrides) -> RunSettings:
        values = {"data_dir": str(glue_tiny), "max_length": 48, "progress": False, "shrinkage_tokens": 2000,
                  "checkpoint": "state"}
        values.update(overrides)
        return RunSettings(**values)

    return make


@pytest.fixture
def make_hparams():
    """``make_hparams(**overrides)``: one epoch of I-STAR (λ = −1, ζ = 0.2) on SST-2 with tiny-bert."""
    def make(**overrides) -> Hyperparameters:
        values = {"model": "tiny-bert", "task": "sst2", "method": "istar", "lam": -1.0, "zeta": 0.2, "epochs": 1,
                  "batch_size": 16, "learning_rate": 1e-3}
        values.update(overrides)
        return Hyperparameters(**values)

    return make


class Recorder:
    """A reporter that wants checkpoints: keeps every record, checks the state file, copies the newest checkpoint
    to ``keep_dir`` and dies (KeyboardInterrupt) after reporting epoch ``stop_after``."""

    wants_checkpoint = True

    def __init__(self, stop_after: int | None = None, keep_dir=None):
        self.records, self.stop_after, self.keep_dir = [], stop_after, keep_dir

    def __call__(self, record, checkpoint_dir):
        self.records.append(record)
        assert (checkpoint_dir / "trainer_state.pt").is_file()
        if self.keep_dir is not None:
            shutil.rmtree(self.keep_dir, ignore_errors=True)
            shutil.copytree(checkpoint_dir, self.keep_dir)
        if self.stop_after is not None and record["epoch"] == self.stop_after:
            raise KeyboardInterrupt  # the trial dies after reporting this epoch


@pytest.fixture
def make_recorder():
    """``make_recorder(stop_after=None, keep_dir=None)``: a :class:`Recorder`."""
    return Recorder
