"""The command line's parser: every command has its function, every flag its help in plain words, and the help
says what the code does."""

from __future__ import annotations


def test_every_command_the_parser_names_has_its_function():
    import argparse

    from istar_tune.cli import HANDLERS
    from istar_tune.cli_parser import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == set(HANDLERS)


def _flags():
    """(command, action) of every option of every subcommand."""
    import argparse

    from istar_tune.cli_parser import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from ((command, a) for a in sub._actions if a.option_strings)


def test_every_boolean_flags_help_says_what_the_flag_does_in_plain_text():
    import argparse

    from istar_tune.cli_parser import build_parser
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


def test_every_commands_help_renders_and_a_percent_in_a_settings_text_stays_a_percent(capsys):
    import argparse

    import pytest

    from istar_tune.cli_parser import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in [None, *commands.choices]:  # argparse formats each help text with %-fields: a bare % breaks it
        with pytest.raises(SystemExit) as shown:
            parser.parse_args([command, "--help"] if command else ["--help"])
        assert shown.value.code == 0, command
    assert "losses within 0.3 %," in " ".join(capsys.readouterr().out.split())  # the step_mode text, as written


def test_replays_schedulers_help_lists_every_strategy_it_replays_a_plugins_too():
    from istar_tune.cli_parser import build_parser
    from istar_tune.replay.summary import strategy_names
    from istar_tune.search import schedulers

    saved = dict(schedulers.SCHEDULERS)
    try:
        schedulers.register(schedulers.Scheduler(name="below", summary="stop below 0.8", build=lambda rule: None))
        replay = build_parser()._subparsers._group_actions[0].choices["replay"]
        help_text = next(a.help for a in replay._actions if a.dest == "schedulers")
        assert set(strategy_names()) >= {"random", "tpe", "asha", "hyperband", "median", "conformal", "below"}
        for name in strategy_names():
            assert name in help_text, name
    finally:
        schedulers.SCHEDULERS.clear()
        schedulers.SCHEDULERS.update(saved)
