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


def _flags():
    """(command, action) of every option of every subcommand."""
    import argparse

    from istar_tune.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from ((command, a) for a in sub._actions if a.option_strings)


def test_every_boolean_flags_help_says_what_the_flag_does_in_plain_text():
    import argparse

    from istar_tune.cli import build_parser
    from istar_tune.reference import collect_config

    booleans = [(c, a) for c, a in _flags() if a.nargs == 0 and not isinstance(a, argparse._HelpAction)]
    assert len(booleans) >= 10
    for command, action in booleans:
        flag, text = action.option_strings[0], action.help or ""
        assert text, f"{command} {flag} has no help"
        says_off = text.startswith(("switch this off", "do not"))
        # A --no- flag turns something off (a setting's False, or a store_true named no_…), and its help says so;
        # any other flag turns something on, and its help never says off.
        assert flag.startswith("--no-") == says_off, (command, flag, text)
        if action.const is False:
            assert flag.startswith("--no-"), (command, flag, text)
    for command, action in _flags():  # no reStructuredText or Sphinx roles in any help
        assert "``" not in (action.help or "") and ":func:" not in (action.help or ""), (command, action.help)
    # and the effect is the one the help names: --no-progress turns progress bars off, --progress is no flag
    parsed = build_parser().parse_args(["train", "--no-progress", "--no-save-checkpoint"])
    values = collect_config(parsed, None)
    assert values["progress"] is False and values["save_checkpoint"] is False
    assert "progress" not in collect_config(build_parser().parse_args(["train"]), None)


def test_the_data_dir_help_gives_the_precedence_the_code_follows(tmp_path, monkeypatch):
    from istar_tune.tasks.data_folder import resolve_data_dir

    text = next(a.help for c, a in _flags() if c == "search" and "--data-dir" in a.option_strings)
    assert text.index("space's data_dir") < text.index("$GLUE_DIR") < text.index("hub")
    (tmp_path / "flag").mkdir()
    (tmp_path / "space").mkdir()
    (tmp_path / "env").mkdir()
    monkeypatch.setenv("GLUE_DIR", str(tmp_path / "env"))
    assert resolve_data_dir(None, tmp_path / "space") == tmp_path / "space"  # the space's before $GLUE_DIR
    assert resolve_data_dir(tmp_path / "flag", tmp_path / "space") == tmp_path / "flag"
