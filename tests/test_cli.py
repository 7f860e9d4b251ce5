from __future__ import annotations

import json

import pytest

from istar_tune.cli import main


def _train_args(glue_tiny, out, *extra):
    return ["train", "--model", "tiny-bert", "--task", "rte", "--data-dir", str(glue_tiny), "--epochs", "1",
            "--batch-size", "16", "--max-length", "32", "--output-dir", str(out), "--no-progress", *extra]


def test_train_command_writes_metrics(glue_tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_train_args(glue_tiny, out, "--method", "istar", "--lam", "-5", "--zeta", "0.2")) == 0
    printed = capsys.readouterr().out
    assert "epoch 1: accuracy" in printed and "best epoch 1" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final"]["epoch"] == 1 and "eval_isoscore_star" in metrics["final"]


def test_config_file_with_flags_overriding(glue_tiny, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("method: cosreg\nepochs: 3\nlam: 2.0\n")
    out = tmp_path / "out"
    assert main(_train_args(glue_tiny, out, "--config", str(config), "--epochs", "1")) == 0
    resolved = (out / "config.yaml").read_text()
    assert "method: cosreg" in resolved and "epochs: 1" in resolved and "lam: 2.0" in resolved


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--task", "mnli"], "unknown"),
        (["--model", "./no/such/model"], "does not exist"),
        (["--lam", "abc"], "lam must be a number, got 'abc'"),
        (["--zeta", "1.5"], "zeta must lie in [0, 1], got 1.5"),
        (["--precision", "fp8"], "precision must be one of"),
        (["--config", "missing.yaml"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(glue_tiny, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert main(_train_args(glue_tiny, out, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("istar-tune: error:") and message in err and "\n" not in err
    assert not out.exists()


def test_data_dir_without_the_task_and_malformed_file(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_train_args(tmp_path, out)) == 2
    assert "RTE files not found" in capsys.readouterr().err
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\n")
    (tmp_path / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    assert main(_train_args(tmp_path, out)) == 2
    err = capsys.readouterr().err
    assert "train.tsv:2: expected 4 tab-separated columns, found 3" in err
    assert not out.exists()


def test_debug_shows_the_traceback(glue_tiny, tmp_path):
    from istar_tune.errors import ConfigError

    with pytest.raises(ConfigError):
        main(["--debug", *_train_args(glue_tiny, tmp_path / "out", "--zeta", "2")])
