"""``istar-tune replay``: the table printed (or written), its recommendation last, and both logged to the search's
own MLflow run."""

from __future__ import annotations

import pytest

from istar_tune import tracking
from istar_tune.cli import main

pytestmark = pytest.mark.slow


def test_the_command_prints_the_table_and_logs_it_to_the_search_run(rehearsal, capsys, tmp_path):
    folder, uri = rehearsal
    assert main(["replay", "--experiment", "landscape", "--tracking-uri", uri, "--simulated", "--replays", "4",
                 "--schedulers", "asha", "random"]) == 0
    out = capsys.readouterr().out
    assert "| asha | grace=1 eta=2 workers=4 |" in out and out.strip().splitlines()[-1].startswith("recommendation: ")
    client = tracking.client(uri)
    experiment = client.get_experiment_by_name("landscape").experiment_id
    parent = tracking.find_runs(client, experiment, **{tracking.TAG_ROLE: "search"})[0]
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "replay")} == {"replay/replay.md",
                                                                                      "replay/replay.csv"}
    assert parent.data.tags[tracking.TAG_REPLAY].startswith("recommendation: ")
    assert main(["replay", "--experiment", "landscape", "--tracking-uri", uri, "--simulated", "--replays", "2",
                 "--format", "parquet", "--output", str(tmp_path / "r.parquet"), "--no-mlflow"]) == 0
    assert (tmp_path / "r.parquet").is_file()



def test_bad_flags_are_one_line(capsys):
    assert main(["replay", "--experiment", "x", "--schedulers", "bohb"]) == 2
    assert capsys.readouterr().err.strip() == ("istar-tune: error: replay: unknown scheduler bohb: choose from random, "
                                               "tpe, asha, hyperband, median, conformal")


def test_the_next_search_takes_the_recommended_strategy_from_the_replay(rehearsal, capsys):
    folder, uri = rehearsal
    search = ["search", str(folder / "grid.yaml"), "--tracking-uri", uri, "--dry-run", "--strategy-from", "landscape"]
    assert main(["replay", "--experiment", "landscape", "--tracking-uri", uri, "--simulated", "--replays", "4",
                 "--schedulers", "asha"]) == 0
    assert "recommendation: undecided" in capsys.readouterr().out
    assert main(search) == 2
    assert capsys.readouterr().err.startswith("istar-tune: error: --strategy-from landscape: the replay recommended "
                                              "no strategy (recommendation: undecided: asha grace=")
    assert main(["replay", "--experiment", "landscape", "--tracking-uri", uri, "--simulated", "--replays", "73",
                 "--schedulers", "asha", "median", "hyperband"]) == 0
    assert "recommendation: asha grace=1 eta=2 workers=4: chose" in capsys.readouterr().out
    client = tracking.client(uri)
    parent = tracking.find_runs(client, client.get_experiment_by_name("landscape").experiment_id,
                                **{tracking.TAG_ROLE: "search"})[0]
    fragment = client.download_artifacts(parent.info.run_id, "replay/strategy.yaml")
    assert main(search) == 0
    dry = capsys.readouterr().out
    assert ("algorithm grid (every combination of the grid values, a choice or range drawn once per configuration), "
            "scheduler asha (grace 1, η 2); strategy from the replay of landscape") in dry
    assert "trials at once per group: 4;" in dry
    assert main([*search[:-1], fragment]) == 0  # the same strategy from the file logged beside the table
    assert f"scheduler asha (grace 1, η 2); strategy from {fragment}" in capsys.readouterr().out
