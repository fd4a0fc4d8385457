"""The command line's conventions: every flag explained in --help, grouped by mode; a command plugs in with
one SUBCOMMANDS row (either form); -v/-q reach the logging levels."""
import argparse
import logging

import pytest

from app import bench_cli, cli
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


# --- Every parser of the command line: the top level, each command, batch's kinds, each `bench NAME` ---

def _every_parser():
    from tests.cli_parsers import every_parser

    return every_parser()


EVERY_PROG = ["python -m app", *(f"python -m app {name}" for name in cli.SUBCOMMANDS),
              *(f"python -m app batch {kind}" for kind in ("fit", "render", "invert")),
              *(f"python -m app bench {name}" for name in bench_cli.BENCHMARKS)]
_SAYS_NO_DEFAULT = (argparse._HelpAction, argparse._VersionAction, argparse._CountAction, argparse._StoreTrueAction,
                    argparse._SubParsersAction)


def test_every_parser_is_walked():
    assert sorted(_every_parser()) == sorted(EVERY_PROG)


@pytest.mark.parametrize("prog", EVERY_PROG)
def test_every_option_of_every_parser_has_help_and_says_its_default(prog):
    """`COMMAND --help` explains every flag, and says the default of each flag that has one (None, False or
    empty is no default: the help says what happens without the flag, if anything)."""
    parser = _every_parser()[prog]
    options = [action for action in parser._actions if action.option_strings and action.help != argparse.SUPPRESS]
    assert [a.option_strings for a in options if not (a.help or "").strip()] == [], f"flags without help in {prog}"
    quiet = [action.option_strings[-1] for action in options if not isinstance(action, _SAYS_NO_DEFAULT)
             and action.default not in (None, False, "", [], argparse.SUPPRESS)
             and "default" not in action.help.lower()]
    assert quiet == [], f"flags in {prog} whose help does not say their default"
    parser.format_help()  # every %(default)s expands


@pytest.mark.parametrize("prog", EVERY_PROG)
def test_every_parser_takes_v_and_q(prog):
    """The README: every command takes -v and -q (`invert -q`, `bench closest -q`, `batch fit -q` too)."""
    parser = _every_parser()[prog]
    flags = {option for action in parser._actions for option in action.option_strings}
    assert {"-v", "--verbose", "-q", "--quiet"} <= flags, prog


@pytest.mark.parametrize("prog", EVERY_PROG)
def test_every_description_and_summary_is_whole(prog):
    """A description (and the top-level listing's summary) never stops mid-sentence (batch's once did)."""
    parser = _every_parser()[prog]
    assert (parser.description or "").strip()[-1:] in (".", ")"), (prog, parser.description)
    if prog == "python -m app":
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for choice in commands._choices_actions:
            assert choice.help.strip().endswith((".", ")")), (choice.dest, choice.help)


def test_invert_takes_q_and_v(tmp_path):
    from tests.cli_parsers import parse_only

    try:
        assert parse_only(["invert", "-q", "--out", str(tmp_path)]).verbosity == -1
        assert parse_only(["invert", "--width", "64", "-v"]).verbosity == 1
        assert parse_only(["batch", "invert", "--out", str(tmp_path), "-q"]).verbosity == -1
        assert parse_only(["bench", "invert", "-q"]).verbosity == -1
    finally:
        configure_logging(0)


@pytest.mark.parametrize("argv, hint", [
    (["invert", "--itres", "3"], "unrecognized arguments: --itres 3: did you mean --iters?"),
    (["batch", "fitt"], "invalid choice: 'fitt' (choose from 'fit', 'render', 'invert'): did you mean fit?"),
    (["bench", "closest", "--repeat", "3"], "unrecognized arguments: --repeat 3: did you mean --repeats?"),
    (["batch", "fit", "--out", "x", "--targts", "spot"],  # argparse says the missing one first: the typo is named too
     "the following arguments are required: --targets; unrecognized --targts: did you mean --targets?"),
])
def test_a_mistyped_flag_of_a_main_command_is_told_the_closest_one(argv, hint, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and hint in err and err.endswith(" (see --help)\n"), err


def test_quiet_prints_nothing_on_stderr_for_a_quick_command(tmp_path):
    """Issue 31: with -q a healthy run says nothing on stderr; on a machine without CUDA no 'no CUDA' line
    (that is at -v only, and in the outputs' backend record)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "app", "render", "--width", "16", "--height", "8", "--out",
                             str(tmp_path / "r"), "-q"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert (tmp_path / "r" / "frame.png").is_file()


def test_the_panel_flag_names_every_panel():
    from app.ui.state import PANELS

    panel = next(action for action in cli._parser()._actions if "--panel" in action.option_strings)
    assert panel.help.endswith(f"{', '.join(PANELS[:-1])} or {PANELS[-1]}"), panel.help
