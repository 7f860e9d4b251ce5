"""The reporter a trial (real or simulated) hands its epochs to: the objective is the run's score, the checkpoint
is measured and pruned, a restore note is reported once."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import ray
from ray import tune

from istar_tune.search.tune import checkpoints
from istar_tune.search.tune.reporter import (
    DEV_OBJECTIVE,
    OBJECTIVE,
    OBJECTIVE_AT,
    RESTORE_NOTE,
    RESTORED_RECORDS,
    TuneReporter,
)
from istar_tune.search.tune.trainable import dev_values
from istar_tune.trial_config import SHARED_EPOCHS_KEY


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
    assert ({k: v for k, v in first.items() if k.startswith(OBJECTIVE_AT)} ==
            {"objective_at_epoch_1": 0.5, "objective_at_epoch_2": 0.6, "objective_at_epoch_3": 0.8})
    earlier = json.loads(first[RESTORED_RECORDS])  # once, with the first report after the resume
    assert [(r["epoch"], r["objective"]) for r in earlier] == [(1, 0.5), (2, 0.6)]
    assert RESTORED_RECORDS not in second and second["objective_at_epoch_3"] == 0.8


def test_with_held_out_data_the_objective_is_the_best_held_out_value_and_the_dev_value_is_beside_it(reported):
    """What Tune's schedulers and searchers see: the held-out value that chooses (the best so far), never the dev
    metric; a shared trial's configurations alike. The epoch-2 model is best on dev but worse on held-out."""
    reporter = TuneReporter("accuracy", completes=(1, 2))
    reporter({"epoch": 1, "accuracy": 0.6, "holdout_accuracy": 0.7, "scored_accuracy": 0.6,
              "scored_holdout_accuracy": 0.7}, None)
    reporter({"epoch": 2, "accuracy": 0.95, "holdout_accuracy": 0.5, "scored_accuracy": 0.6,
              "scored_holdout_accuracy": 0.7}, None)
    (first, _), (second, _) = reported["reports"]
    assert (first[OBJECTIVE], second[OBJECTIVE]) == (0.7, 0.7)
    assert (first[DEV_OBJECTIVE], second[DEV_OBJECTIVE]) == (0.6, 0.6)  # reported, choosing nothing
    assert second["objective_at_epoch_1"] == second["objective_at_epoch_2"] == 0.7
    assert second["dev_objective_at_epoch_2"] == 0.6
    config = {"epochs": 2, SHARED_EPOCHS_KEY: [1, 2]}
    assert dev_values(config, second) == {1: 0.6, 2: 0.6}
    assert dev_values({"epochs": 2}, {"epoch": 2, "objective": 0.8}) == {}  # no held-out data: nothing beside


def test_the_heartbeat_says_batches_rate_and_time_left_every_interval(monkeypatch):
    import istar_tune.search.tune.reporter as module

    clock = iter([100.0, 100.5, 101.0, 102.0, 102.2, 200.0])
    monkeypatch.setattr(module.time, "monotonic", lambda: next(clock))
    lines: list[str] = []
    reporter = TuneReporter("accuracy", label="abc — istar λ=-1 ζ=0.2 lr=1e-4 bs=32 ep=3 s42 (bert/rte)", epochs=3,
                            heartbeat_s=1.0)
    for done in (1, 2, 3, 5, 6):  # the first batch starts the clock; lines at least 1 s apart
        reporter.heartbeat(2, done, 21, write=lines.append)
    assert lines == ["  trial abc epoch 2/3: batch 3/21 (2 batches/s, about 9 s left of the epoch) — istar λ=-1 ζ=0.2 "
                     "lr=1e-4 bs=32 ep=3 s42 (bert/rte)",
                     "  trial abc epoch 2/3: batch 5/21 (2 batches/s, about 8 s left of the epoch) — istar λ=-1 ζ=0.2 "
                     "lr=1e-4 bs=32 ep=3 s42 (bert/rte)"]
    reporter.heartbeat(3, 1, 21, write=lines.append)  # a new epoch restarts the clock, silently
    assert len(lines) == 2
