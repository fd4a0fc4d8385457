"""The command line's real parsers, for tests that check them without running a command.

`every_parser()` gives each parser by its prog (the top level, every command, `batch`'s kinds and every
`bench NAME`); `parse_only(argv)` parses `python -m app ARGV` as the command would, and runs nothing.
A "module:main" command (and a benchmark) builds its parser inside `main(argv)` and parses at once:
its parser is caught at its `parse_args` call, before anything else runs.
"""
from __future__ import annotations

import argparse
import importlib
from unittest import mock

from app import bench_cli, cli
from app.flags import OneLineParser


class _Caught(BaseException):  # not an Exception: no command's error handling swallows it
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _raise_caught(self, args=None, namespace=None):
    raise _Caught(self)


def main_parser(target: str) -> argparse.ArgumentParser:
    """The parser that the "module:function" `target`'s main(argv) parses its argv with (nothing else runs)."""
    module, function = target.split(":")
    main = getattr(importlib.import_module(module), function)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", _raise_caught), \
            mock.patch.object(OneLineParser, "parse_args", _raise_caught):  # every parser here is one of these
        try:
            main([])
        except _Caught as caught:
            return caught.parser
    raise AssertionError(f"{target} returned without parsing its arguments")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands' parsers by name ({} for none); a lazy command parser adds its flags first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.format_help()  # cli's lazy command parsers import their module and add their flags here
            return dict(action.choices)
    return {}


def command_parser(name: str) -> argparse.ArgumentParser:
    """`python -m app NAME`'s parser: the "module" row's subparser, or the one a "module:main" row parses with."""
    target = cli.SUBCOMMANDS[name]
    return main_parser(target) if ":" in target else subparsers(cli._parser())[name]


def every_parser() -> dict[str, argparse.ArgumentParser]:
    """Every parser of the command line, by prog: `python -m app`, each command, each of their subcommands,
    and `python -m app bench NAME` for each benchmark."""
    top = cli._parser()
    found = {top.prog: top}
    for name in cli.SUBCOMMANDS:
        parser = command_parser(name)
        found[parser.prog] = parser
        for sub in subparsers(parser).values():
            found[sub.prog] = sub
    for target in bench_cli.BENCHMARKS.values():
        parser = main_parser(target)
        found[parser.prog] = parser
    return found


def parse_only(argv: list[str]) -> argparse.Namespace:
    """`python -m app ARGV` parsed by the parsers the command uses (a UserError for what it would refuse), not run."""
    _verbosity, rest = cli._split_verbosity(argv)
    if rest and ":" in cli.SUBCOMMANDS.get(rest[0], ""):
        return command_parser(rest[0]).parse_args(rest[1:])
    args = cli._parser().parse_args(argv)
    if args.command is None:
        cli._check_mode_flags(args, argv)
    elif args.command == "bench" and args.name != "all":
        return main_parser(bench_cli.BENCHMARKS[args.name]).parse_args(args.flags)
    return args
