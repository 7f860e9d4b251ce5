"""The reporter a trial (real or simulated) hands its epochs to: the objective is the run's score, the checkpoint
is measured and pruned, a restore note is reported once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray
from ray import tune

from istar_tune.search import checkpoints
from istar_tune.search.trainable import OBJECTIVE, RESTORE_NOTE, TuneReporter


@pytest.fixture
def reported(monkeypatch):
    calls = {"reports": [], "pruned": []}
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: calls["reports"].append((metrics, checkpoint)))
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node-1"))
    monkeypatch.setattr(checkpoints, "prune", lambda keep: calls["pruned"].append(keep))
    return calls


def test_the_objective_is_the_runs_score_and_a_checkpoint_is_measured_and_pruned(reported, tmp_path):
    reporter = TuneReporter("accuracy", keep=2, note="resumed from checkpoint_000001")
    (tmp_path / "state.bin").write_bytes(b"x" * 100)
    reporter({"epoch": 2, "accuracy": 0.8, "scored_accuracy": 0.7}, tmp_path)
    reporter({"epoch": 3, "accuracy": 0.9}, None)
    (first, checkpoint), (second, none) = reported["reports"]
    assert first[OBJECTIVE] == 0.7 and second[OBJECTIVE] == 0.9  # the scored epoch's value where there is one
    assert first["checkpoint_bytes"] == 100 and first["node_id"] == "node-1" and checkpoint is not None
    assert first[RESTORE_NOTE] == "resumed from checkpoint_000001" and RESTORE_NOTE not in second
    assert none is None and "checkpoint_bytes" not in second
    assert reported["pruned"] == [2]  # once: only the report that carried a checkpoint
