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
    assert printed.splitlines()[0] == (  # what it trains on, said first
        "task rte: input sentence1 + sentence2; label label; classification, 2 classes: entailment (30), "
        "not_entailment (34); "
        "64 train / 32 validation examples read (published: 2,490 / 277)")
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


@pytest.mark.parametrize(("flags", "message"), [
    (["--task", "sst2", "--model", "tiny-bert"], "no data folder (--data-dir, the space's data_dir or $GLUE_DIR) and "
                                                 "the Hugging Face hub does not answer within 5 s"),
    (["--model", "bert"], "model 'bert' (bert-base-cased) is not on this machine, and the Hugging Face hub does not "
                          "answer"),
])
def test_train_without_the_hub_says_so_in_one_line_within_seconds(glue_tiny, tmp_path, monkeypatch, capsys, flags,
                                                                   message):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GLUE_DIR", raising=False)
    data = [] if "--task" in flags else ["--data-dir", str(glue_tiny)]
    began = time.monotonic()
    assert main(["train", *flags, *data, "--output-dir", str(tmp_path / "out")]) == 2
    assert time.monotonic() - began < 10  # no retries (they took 30 to 55 s)
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error and not (tmp_path / "out").exists()
