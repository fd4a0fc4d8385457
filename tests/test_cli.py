"""The command line's conventions: every flag explained in --help, grouped by mode; a command plugs in with
one SUBCOMMANDS row (either form); -v/-q reach the logging levels."""
import argparse
import logging

import pytest

from app import cli
from app.flags import command_parser, configure_logging
from engine.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:  # this module doubles as a "module" row
    parser.add_argument("--times", type=int, default=1, help="how many times")


def run(args: argparse.Namespace) -> int:
    print("demo " * args.times + f"verbosity {args.verbosity}")
    return 0


def legacy_main(argv: list[str]) -> int:  # ... and as a "module:main" row
    print(f"legacy {argv}")
    return 7


def _actions(parser: argparse.ArgumentParser):
    return [action for action in parser._actions if not isinstance(action, (argparse._HelpAction,
                                                                              argparse._SubParsersAction))]


def _command_parser(name: str) -> argparse.ArgumentParser:
    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = commands.choices[name]
    parser.format_help()  # a lazy command parser adds its flags when asked for help
    return parser


@pytest.mark.parametrize("name", [None, *cli.SUBCOMMANDS])
def test_every_flag_is_explained(name):
    parser = cli._parser() if name is None else _command_parser(name)
    missing = [action.option_strings or action.dest for action in _actions(parser) if not (action.help or "").strip()]
    assert missing == [], f"flags without help in {parser.prog}: {missing}"


def test_top_level_help_groups_flags_by_mode_and_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    headless, window = text.index("headless mode (--headless):"), text.index("desktop app (the default mode)")
    assert headless < text.index("--only NAMES", headless) < window < text.index("--screenshot PATH", window)
    for name in cli.SUBCOMMANDS:
        assert f"    {name} " in text  # listed with its one-line summary
    assert "Exit codes: 0 ok, 1" in " ".join(text.split())


def test_a_command_plugs_in_with_one_row_of_either_form(monkeypatch, capsys):
    monkeypatch.setattr(cli, "SUBCOMMANDS", {**cli.SUBCOMMANDS, "demo": "tests.test_cli",
                                              "legacy": "tests.test_cli:legacy_main"})
    assert cli.main(["demo", "--times", "2", "-v"]) == 0
    assert capsys.readouterr().out == "demo demo verbosity 1\n"
    assert cli.main(["-q", "legacy", "--anything", "x"]) == 7
    assert capsys.readouterr().out == "legacy ['--anything', 'x']\n"
    assert cli.main(["demo", "--times", "two"]) == 2
    assert capsys.readouterr().err == ("error: python -m app demo: argument --times: invalid int value: 'two' "
                                       "(see --help)\n")


@pytest.mark.parametrize("flags, ours, others", [
    ([], logging.INFO, logging.WARNING), (["-q"], logging.WARNING, logging.WARNING),
    (["-qq"], logging.ERROR, logging.ERROR), (["-v"], logging.DEBUG, logging.WARNING),
    (["-vv"], logging.DEBUG, logging.DEBUG), (["-v", "-v"], logging.DEBUG, logging.DEBUG),
])
def test_verbosity_sets_our_loggers_and_leaves_libraries_at_warnings(flags, ours, others):
    args = cli._parser().parse_args(flags)
    configure_logging(args.verbosity)
    try:
        assert logging.getLogger("engine").level == ours and logging.getLogger("app").level == ours
        assert logging.getLogger().level == others
    finally:
        configure_logging(0)


@pytest.mark.parametrize("argv, hint", [
    (["fit", "--target", "blob", "--iter", "5"], "unrecognized arguments: --iter 5: did you mean --iters?"),
    (["fit", "--target", "blob", "--iter=5"], "unrecognized arguments: --iter=5: did you mean --iters?"),
    (["rendr", "--t", "0.5"], "invalid choice: 'rendr' (choose from 'bench', 'render', 'fit', 'batch', 'invert'): "
                              "did you mean render?"),
    (["--headles"], "unrecognized arguments: --headles: did you mean --headless?"),
    (["render", "--edges", "sotf"], "argument --edges: invalid choice: 'sotf' (choose from 'hard', 'soft'): "
                                    "did you mean soft?"),
    (["bench", "lanch"], "argument NAME: invalid choice: 'lanch'"),  # a "module" row's positional choice
])
def test_a_mistyped_flag_or_command_name_is_told_the_closest_one(argv, hint, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and hint in err and err.endswith(" (see --help)\n"), err
    if argv[0] == "bench":
        assert "did you mean launch?" in err


@pytest.mark.parametrize("argv", [["--zzzzzz"], ["fit", "--target", "blob", "--screenshot", "x.png"]])
def test_nothing_close_no_guess_and_a_command_is_never_offered_another_modes_flag(argv, capsys):
    """--screenshot is a flag of the desktop app, not of `fit`: the top level's flags are no suggestion for it."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and "did you mean" not in err, err


def test_a_module_main_commands_parser_suggests_its_own_flags_too():
    parser = command_parser("demo", "A demo.")
    parser.add_argument("--iters", type=int, default=1, help="steps")
    with pytest.raises(UserError, match=r"python -m app demo: unrecognized arguments: --iter 3: did you mean --iters\?"):
        parser.parse_args(["--iter", "3"])
    with pytest.raises(UserError, match="did you mean --verbose"):
        parser.parse_args(["--verbos"])
    args = parser.parse_args(["--iters", "3"])
    assert vars(args) == {"iters": 3, "verbosity": 0}  # the suggestions never reach the namespace
