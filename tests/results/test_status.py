from __future__ import annotations

from istar_tune import tracking

CONFIG = {"model": "tiny-bert", "task": "rte", "method": "istar", "learning_rate": 1e-3, "batch_size": 16,
          "epochs": 2, "lam": -1.0, "zeta": 0.2}


def test_status_counts_each_groups_trials_and_its_best_so_far(mlflow_store, capsys):
    from istar_tune.cli import main

    uri, client, experiment = mlflow_store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search",
                                                 tracking.TAG_PLAN: tracking.encode_plan({"m/rte/base": 4})})
    writer = tracking.RunWriter(uri, experiment, "exp", parent.info.run_id, {})
    config = {**CONFIG, "model": "m", "method": "base"}
    for trial_id, status, value in (("a", "finished", 0.7), ("b", "failed", 0.9), ("c", None, 0.8)):
        writer.start(trial_id, config)
        writer.metrics(trial_id, 1, {"accuracy": value})
        if status:
            writer.end(trial_id, status, "FINISHED" if status == "finished" else "FAILED")
    assert writer.close(timeout=60)
    assert main(["status", "--experiment", "exp", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "2 of 4 trials ended, 1 running" in out
    assert "| m/rte/base | 1 | 1 | 1 | 0 | 1 | 0 | accuracy | 0.8 |" in out
