from __future__ import annotations

import subprocess
import sys

import pytest

from istar_tune import tracking
from istar_tune.errors import ConfigError


def test_simulated_runs_are_refused_by_tables_of_real_runs_and_the_reverse(mlflow_store):
    uri, client, experiment = mlflow_store
    client.create_run(experiment, tags={tracking.TAG_ROLE: "trial", tracking.TAG_SIMULATED: "true",
                                        tracking.TAG_TRIAL_ID: "t1"})
    with pytest.raises(ConfigError, match="simulated runs"):
        tracking.trial_runs(uri, "exp")
    from istar_tune.results.tables import build_table

    with pytest.raises(ConfigError, match="--simulated"):
        build_table(uri, "exp", "best")
    real = tracking.client(uri).create_experiment("real")
    tracking.client(uri).create_run(real, tags={tracking.TAG_ROLE: "trial", tracking.TAG_TRIAL_ID: "t2"})
    with pytest.raises(ConfigError, match="real runs"):
        tracking.trial_runs(uri, "real", simulated=True)


def test_reading_runs_back_loads_neither_ray_nor_torch():
    code = ("import sys, istar_tune.results.tables, istar_tune.tracking, istar_tune.config; "
            "print('ray' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]




def test_best_trials_of_named_groups_read_only_their_top_runs_and_agree_with_a_full_read(group_run, mlflow_store,
                                                                                        monkeypatch):
    uri, client, experiment = mlflow_store
    monkeypatch.setattr(tracking.runs, "BEST_OF_TOP", 3)
    # rte: a failed trial scores highest (ignored), three tie at 0.8 (the lowest trial id wins) beyond the top 3.
    for trial_id, value, status in [("t9", 0.95, "failed"), ("t5", 0.8, "finished"), ("t3", 0.8, "stopped_early"),
                                    ("t7", 0.8, "finished"), ("t1", 0.5, "finished"), ("t2", None, "finished")]:
        group_run(client, experiment, trial_id, value, status)
    for trial_id, value in [("t4", 0.6), ("t6", 0.7)]:  # mrpc: settled by its top runs
        group_run(client, experiment, trial_id, value, task="mrpc")
    groups = [("bert", "rte", "istar"), ("bert", "mrpc", "istar"), ("bert", "cola", "istar")]
    picked = tracking.best_trials(uri, "exp", groups=groups)
    full = tracking.best_trials(uri, "exp")
    assert {k: v.trial_id for k, v in picked.items()} == {k: v.trial_id for k, v in full.items()}
    assert picked[("bert", "rte", "istar")].trial_id == "t3" and picked[("bert", "mrpc", "istar")].trial_id == "t6"
    assert ("bert", "cola", "istar") not in picked  # a group without runs has no best
    group_run(client, experiment, "t8", 0.9, simulated=True)
    with pytest.raises(ConfigError, match="--simulated"):
        tracking.best_trials(uri, "exp", groups=groups)
