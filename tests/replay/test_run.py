"""``istar-tune replay``: the table printed (or written), its recommendation last, and both logged to the search's
own MLflow run; its random search of n and the budget table of the same store agree at every n."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from istar_tune import tracking
from istar_tune.cli import main
from istar_tune.replay.reading import read_grid
from istar_tune.replay.schedulers import random_search
from istar_tune.results.budget import budget_table

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


class _Drawn:
    """A generator whose one draw is the subset given: the replay's random search run on every subset in turn."""

    def __init__(self, subset: tuple[int, ...]):
        self.subset = subset

    def choice(self, total, size, replace):
        assert size == len(self.subset) and not replace
        return np.array(self.subset)


def test_the_budget_table_is_the_replays_random_search_at_every_n(rehearsal):
    """One store, two commands: the budget's closed form (without replacement) equals the mean, over every subset of
    n configurations, of what the replay's random search of n chooses, at every n."""
    _, uri = rehearsal
    table = budget_table(tracking.trial_runs(uri, "landscape", True), every_n=True)
    for unit in read_grid(uri, "landscape", simulated=True):
        rows = table[table.method == unit.method]
        total = len(unit.curves)
        assert list(rows.n) == list(range(1, total + 1))
        for n, chosen, dev in zip(rows.n, rows.chosen, rows.dev):
            picks = [random_search(unit.curves, _Drawn(subset), n).chosen
                     for subset in itertools.combinations(range(total), n)]
            assert chosen == round(100 * np.mean([unit.score_of(p) for p in picks]), 2), (unit.method, n)
            assert dev == round(100 * np.mean([unit.dev_score_of(p) if unit.curves[0].dev else unit.score_of(p)
                                               for p in picks]), 2), (unit.method, n)
    dodge = budget_table(tracking.trial_runs(uri, "landscape", True), with_replacement=True)
    assert dodge.attrs["caption"] != table.attrs["caption"] and "Dodge et al. (2019)" in dodge.attrs["caption"]
