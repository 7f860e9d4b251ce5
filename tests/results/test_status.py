from __future__ import annotations

from istar_tune import tracking


def test_status_counts_each_groups_trials_and_its_best_so_far(mlflow_store, capsys, trial_config):
    from istar_tune.cli import main

    uri, client, experiment = mlflow_store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search",
                                                 tracking.TAG_PLAN: tracking.encode_plan({"m/rte/base": 4})})
    writer = tracking.RunWriter(uri, experiment, "exp", parent.info.run_id, {})
    config = {**trial_config, "model": "m", "method": "base"}
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


def test_with_held_out_data_the_best_so_far_is_the_held_out_value(mlflow_store, capsys, trial_config):
    from istar_tune.cli import main

    uri, client, experiment = mlflow_store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search",
                                                 tracking.TAG_PLAN: tracking.encode_plan({"m/rte/base": 2})})
    writer = tracking.RunWriter(uri, experiment, "exp", parent.info.run_id, {})
    config = {**trial_config, "model": "m", "method": "base"}
    # "a" is best on the dev set, "b" on the held-out examples that choose.
    for trial_id, dev, held in (("a", 0.9, 0.6), ("b", 0.7, 0.8)):
        writer.start(trial_id, config)
        writer.metrics(trial_id, 1, {"accuracy": dev, "holdout_accuracy": held, "scored_accuracy": dev,
                                     "scored_holdout_accuracy": held})
        writer.end(trial_id, "finished", "FINISHED")
    assert writer.close(timeout=60)
    assert main(["status", "--experiment", "exp", "--tracking-uri", uri]) == 0
    assert "| held-out accuracy | 0.8 |" in capsys.readouterr().out


def test_status_by_name_and_watch_redraws_until_the_search_ended(mlflow_store, capsys):
    from istar_tune.cli import main
    from istar_tune.results.status import watch_status

    uri, client, experiment = mlflow_store
    parent = client.create_run(experiment, tags={tracking.TAG_ROLE: "search",
                                                 tracking.TAG_PLAN: tracking.encode_plan({"m/rte/base": 1})})
    assert main(["status", "exp", "--tracking-uri", uri]) == 0
    assert capsys.readouterr().out.startswith("search exp: RUNNING; 0 of 1 trials ended")
    assert main(["status", "--tracking-uri", uri]) == 2
    assert "name one search" in capsys.readouterr().err
    shown, naps = [], []

    def nap(seconds):  # the search ends while the watcher sleeps
        naps.append(seconds)
        client.set_terminated(parent.info.run_id, "FINISHED")

    watch_status(uri, "exp", every_s=5, redraw=True, write=shown.append, sleep=nap)
    assert naps == [5] and len(shown) == 2  # one refresh after the end, then it stops by itself
    assert all(text.startswith("\033[H\033[2J") for text in shown)  # redrawn in place, not appended
    assert "RUNNING" in shown[0] and "FINISHED" in shown[1] and shown[1].endswith("|")
