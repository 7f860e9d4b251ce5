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
                                               "tpe, asha, hyperband, median")
