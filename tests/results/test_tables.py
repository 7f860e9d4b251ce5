"""The best and λ | ζ tables from MLflow runs, their formats and the table command."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from istar_tune.cli import main
from istar_tune.errors import ConfigError
from istar_tune.results.formats import render
from istar_tune.results.tables import build_table


def test_best_table_picks_the_best_trial_and_shows_missing_tasks(store):
    uri, _ = store
    table = build_table(uri, "s", "best", tasks=["sst2", "cola", "rte"])
    assert list(table.columns) == ["model", "task", "method", "metric", "score", "held_out", "batch_size", "epochs",
                                   "learning_rate", "lam", "zeta", "alpha", "trials", "trial_id"]
    assert table["held_out"].isna().all() and "chosen by the dev score shown" in table.attrs["caption"]
    rows = {(r.task, r.method): r for r in table.itertuples()}
    assert len(rows) == 6  # 3 tasks × 2 methods, missing ones included
    assert (rows["sst2", "base"].trial_id, rows["sst2", "base"].score, rows["sst2", "base"].trials) == ("b2", 0.85, 2)
    assert rows["sst2", "base"].learning_rate == 5e-5 and rows["sst2", "base"].lam is pd.NA
    assert (rows["sst2", "istar"].trial_id, rows["sst2", "istar"].lam, rows["sst2", "istar"].zeta) == ("i1", -1.0, 0.2)
    assert rows["cola", "istar"].metric == "mcc" and rows["cola", "istar"].score == 0.41
    assert rows["rte", "base"].trials == 0 and rows["rte", "base"].score is pd.NA
    assert rows["cola", "base"].trials == 0
    by_best_epoch = build_table(uri, "s", "best", scope="best-epoch", tasks=["sst2"])
    assert by_best_epoch.iloc[0].trial_id == "b1" and by_best_epoch.iloc[0].score == 0.90


def test_best_table_formats(store, tmp_path):
    uri, _ = store
    table = build_table(uri, "s", "best", tasks=["sst2", "rte"], methods=["base"])
    md = render(table, "md")
    assert md.splitlines()[0] == ("| model | task | method | metric | score | held_out | batch_size | epochs | "
                                  "learning_rate | lam | zeta | alpha | trials | trial_id |")
    assert md.splitlines()[2] == ("| minilm | sst2 | base | accuracy | 0.85 | — | 16 | 2 | 5e-05 | — | — | — | 2 | "
                                  "b2 |")
    assert md.splitlines()[3] == "| minilm | rte | base | accuracy | — | — | — | — | — | — | — | — | 0 | — |"
    csv = render(table, "csv").splitlines()
    assert csv[0] == ("model,task,method,metric,score,held_out,batch_size,epochs,learning_rate,lam,zeta,alpha,trials,"
                      "trial_id")
    assert csv[1] == "minilm,sst2,base,accuracy,0.85,,16,2,5e-05,,,,2,b2"
    latex = render(table, "latex")
    assert "\\begin{tabular}" in latex and "minilm & sst2 & base & accuracy & 0.85" in latex
    render(table, "parquet", tmp_path / "best.parquet")
    back = pq.read_table(tmp_path / "best.parquet")
    assert back.column("trial_id").to_pylist() == ["b2", None] and back.column("trials").to_pylist() == [2, 0]
    assert back.column("score").to_pylist() == [0.85, None] and back.column("batch_size").to_pylist() == [16, None]


def test_with_held_out_data_the_best_table_chooses_on_it_and_shows_the_dev_score_beside(log_trial, tmp_path, capsys):
    from istar_tune import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = tracking.client(uri)
    exp = tracking.ensure_experiment(client, "h", str(tmp_path / "artifacts"))
    # "dev" is best on the dev set, "held" on the held-out examples: the held-out one is chosen.
    log_trial(client, exp, "dev", "minilm", "sst2", "base",
              {"accuracy": [0.91], "holdout_accuracy": [0.60], "scored_accuracy": [0.91],
               "scored_holdout_accuracy": [0.60]}, learning_rate=1e-5)
    log_trial(client, exp, "held", "minilm", "sst2", "base",
              {"accuracy": [0.70, 0.80], "holdout_accuracy": [0.75, 0.70], "scored_accuracy": [0.70, 0.70],
               "scored_holdout_accuracy": [0.75, 0.75]}, learning_rate=5e-5)
    [row] = build_table(uri, "h", "best").itertuples()
    assert (row.trial_id, row.held_out, row.score) == ("held", 0.75, 0.70)  # the dev score at the chosen epoch
    table = build_table(uri, "h", "best")
    assert "chosen by `held_out`" in table.attrs["caption"] and "chose nothing" in table.attrs["caption"]
    assert main(["table", "--tracking-uri", uri, "--experiment", "h"]) == 0
    assert "chosen by `held_out`" in capsys.readouterr().out  # the command prints the caption that says so
    with pytest.raises(ConfigError, match="held training data out"):
        build_table(uri, "h", "best", scope="best-epoch")


def test_lambda_zeta_table_with_the_paper_beside_ours(store):
    uri, _ = store
    table = build_table(uri, "s", "lambda-zeta", tasks=["sst2", "cola", "rte"])
    assert list(table.columns) == ["model", "SST-2", "CoLA", "RTE", "average"]
    assert table.iloc[0].tolist() == ["minilm", "-1 | 0.2", "-3 | 0.4", "—", "-2 | 0.3"]
    against = build_table(uri, "s", "lambda-zeta", models=["bert", "albert"], tasks=["sst2"], against_paper=True)
    assert against.iloc[0].tolist() == ["bert", "— (paper -5 | 0.2)", "— (paper -2.11 | 0.44)"]
    # The paper prints ALBERT's average ζ as 0.36; its own cells average 0.378: both are shown, nothing invented.
    assert against.iloc[1]["average"] == "— (paper -1.44 | 0.36; its cells average -1.444 | 0.378)"


def test_table_command_and_its_errors(store, tmp_path, capsys):
    uri, _ = store
    assert main(["table", "--tracking-uri", uri, "--experiment", "s", "--tasks", "sst2", "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("model,task,method,metric,score")
    out = tmp_path / "t.parquet"
    assert main(["table", "--tracking-uri", uri, "--experiment", "s", "--format", "parquet", "--output", str(out)]) == 0
    assert pq.read_table(out).num_rows == 3  # the groups searched (minilm × sst2 × base, istar; × cola × istar)
    for argv, message in [
        (["--experiment", "nope"], "no MLflow experiment named 'nope'"),
        (["--experiment", "s", "--format", "xlsx"], "unknown format 'xlsx'"),
        (["--experiment", "s", "--kind", "radar"], "unknown table kind 'radar'"),
        (["--experiment", "s", "--format", "parquet"], "give --output"),
    ]:
        assert main(["table", "--tracking-uri", uri, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
    assert main(["table", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", "--experiment", "s"]) == 2
    assert "no MLflow store" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    assert main(["table", "--tracking-uri", "http://127.0.0.1:9", "--experiment", "s"]) == 2
    assert "cannot reach the MLflow server" in capsys.readouterr().err
