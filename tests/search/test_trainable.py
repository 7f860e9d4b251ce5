"""The reporter a trial (real or simulated) hands its epochs to: the objective is the run's score, the checkpoint
is measured and pruned, a restore note is reported once."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import ray
from ray import tune

from istar_tune.search import checkpoints
from istar_tune.search.trainable import OBJECTIVE, OBJECTIVE_AT, RESTORE_NOTE, RESTORED_RECORDS, TuneReporter


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


def test_a_shared_trial_reports_each_configurations_objective_and_a_resume_its_earlier_records(reported):
    reporter = TuneReporter("accuracy", completes=(1, 2, 3))
    reporter.remember([{"epoch": 1, "accuracy": 0.5}, {"epoch": 2, "accuracy": 0.7, "scored_accuracy": 0.6}])
    reporter({"epoch": 3, "accuracy": 0.8}, None)
    reporter({"epoch": 4, "accuracy": 0.9}, None)
    (first, _), (second, _) = reported["reports"]
    assert {k: v for k, v in first.items() if k.startswith(OBJECTIVE_AT)} == \
        {"objective_at_epoch_1": 0.5, "objective_at_epoch_2": 0.6, "objective_at_epoch_3": 0.8}
    earlier = json.loads(first[RESTORED_RECORDS])  # once, with the first report after the resume
    assert [(r["epoch"], r["objective"]) for r in earlier] == [(1, 0.5), (2, 0.6)]
    assert RESTORED_RECORDS not in second and second["objective_at_epoch_3"] == 0.8
