"""The flags and conventions every command shares: parsers, `--arch`, `-v`/`-q` and the logging they set.

The commands (`app/scenes/*_cli.py`, `app/batch/`, `bench/`) and the examples build their
parsers from these; `app.cli` only parses the top level and dispatches. A parser here
fails with one `error:` line and exit code 2 (a `UserError`), never a usage block, and a
mistyped flag or choice gets a "did you mean" from the ones the parser knows.

This module imports no command (and nothing that imports Taichi), so that any command
can import it.
"""
from __future__ import annotations

import argparse
import difflib
import logging
import sys

from engine.backend import ARCH_CHOICES, ARCH_ENV
from engine.errors import UserError

VERBOSITY_FLAGS = {"-v": 1, "--verbose": 1, "-vv": 2, "-q": -1, "--quiet": -1, "-qq": -2}
_SUGGESTIONS = "_did_you_mean"  # the namespace attribute a (sub)parser leaves its suggestions in


def did_you_mean(word: str, known) -> str:
    """`: did you mean X?` for the known name closest to a mistyped `word` (difflib), else ""."""
    close = difflib.get_close_matches(word, [str(name) for name in known], n=1)
    return f": did you mean {close[0]}?" if close else ""


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one `error:` line and exit code 2 (a `UserError`), not a usage block.

    Flags must be spelled out (no abbreviations: `--scr` is not `--screenshot`); a mistyped flag
    (`--iter`) or choice (a command's name, `--edges sotf`) is told the closest one it knows."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:
        if message.startswith("the following arguments are required"):  # said before any unknown flag: name one too
            message += self._unknown_flag_hint()
        raise UserError(f"{self.prog}: {message} (see --help)")

    def _unknown_flag_hint(self) -> str:
        """`; unrecognized --targts: did you mean --targets?` for the first unknown flag given with a close match."""
        known = self.option_strings()
        for token in getattr(self, "_tokens", ()):
            flag = token.split("=", 1)[0]
            if flag.startswith("-") and flag not in known and not _is_number(flag):
                hint = did_you_mean(flag, known)
                if hint:
                    return f"; unrecognized {flag}{hint}"
        return ""

    def _check_value(self, action: argparse.Action, value) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:  # an invalid choice (a command's name is a choice of its subparsers)
            raise argparse.ArgumentError(action, exc.message + did_you_mean(str(value), action.choices or ())) from None

    def option_strings(self) -> list[str]:
        """Every flag this parser takes (`--iters`, `-v`, ...)."""
        return [option for action in self._actions for option in action.option_strings]

    def parse_known_args(self, args=None, namespace=None):
        self._tokens = [str(token) for token in (sys.argv[1:] if args is None else args)]  # for error()'s hint
        parsed, extras = super().parse_known_args(args, namespace)
        hints = dict(getattr(parsed, _SUGGESTIONS, {}))  # a subparser's, copied up into this namespace
        for token in extras:  # a subparser's flags are its own: the top level never offers one of its flags
            flag = token.split("=", 1)[0]
            if flag.startswith("-") and flag not in hints:
                hints[flag] = did_you_mean(flag, self.option_strings())
        if hints:
            setattr(parsed, _SUGGESTIONS, hints)
        return parsed, extras

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        hints = vars(parsed).pop(_SUGGESTIONS, {})
        if extras:
            hint = next((hints[flag] for flag in (token.split("=", 1)[0] for token in extras) if hints.get(flag)), "")
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def add_verbosity_arguments(parser: argparse.ArgumentParser, default=0) -> None:
    """`-v/--verbose` and `-q/--quiet` (repeatable), counted into `args.verbosity`."""
    group = parser.add_argument_group("verbosity")
    group.add_argument("-v", "--verbose", dest="verbosity", action="count", default=default,
                       help="more detail on stderr (-vv: debug)")
    group.add_argument("-q", "--quiet", dest="verbosity", action=_Decrement, nargs=0, default=default,
                       help="warnings and errors only, no progress bars (-qq: errors only)")


class _Decrement(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, (getattr(namespace, self.dest, None) or 0) - 1)


def add_arch_argument(parser: argparse.ArgumentParser) -> None:
    """The `--arch` flag every command takes (default: $SHANNON_ARCH, else auto)."""
    parser.add_argument("--arch", choices=None, default=None, metavar="|".join(ARCH_CHOICES),
                        help=f"backend to run on (default: ${ARCH_ENV}, else auto: CUDA if present, else cpu)")


def example_parser(doc: str) -> argparse.ArgumentParser:
    """The flags every program in examples/ takes: --arch (one of ARCH_CHOICES) and --headless (no window)."""
    parser = argparse.ArgumentParser(description=summary_of(doc))
    parser.add_argument("--arch", choices=ARCH_CHOICES, default=None, help=f"backend (default: ${ARCH_ENV}, else auto)")
    parser.add_argument("--headless", action="store_true", help="print the results and open no window")
    return parser


class _CommandParser(OneLineParser):
    """A "module:main" command's parser: parsing also applies its -v/-q (given there, else those before the command)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        if getattr(parsed, "verbosity", 0):
            configure_logging(parsed.verbosity)
        return parsed, rest


def command_parser(name: str, doc: str | None) -> OneLineParser:
    """A parser for `python -m app NAME` with the conventions of `app.cli` (for its "module:main" rows)."""
    parser = _CommandParser(prog=f"python -m app {name}", description=summary_of(doc),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_verbosity_arguments(parser)
    return parser


def summary_of(doc: str | None) -> str:
    """The first paragraph of a docstring ("" for none): a command's summary, its first sentence whole even
    where it wraps onto a second line (the `--help` listing refills it; a description keeps its lines)."""
    return "\n".join(line.strip() for line in (doc or "").strip().split("\n\n")[0].splitlines())


_handler: logging.Handler | None = None  # the stderr handler configure_logging installed
OWN_LOGGERS = ("app", "engine", "bench")  # ours follow -v/-q; other libraries' stay at warnings unless -vv


def configure_logging(verbosity: int) -> None:
    """Logging to stderr: -qq errors, -q warnings, default info, -v debug (ours), -vv debug (every library too)."""
    levels = {-2: logging.ERROR, -1: logging.WARNING, 0: logging.INFO}
    ours = logging.DEBUG if verbosity > 0 else levels[max(verbosity, -2)]
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)  # only our own: a host's handlers (pytest's) stay
    _handler = _StderrHandler()
    _handler.setFormatter(_Formatter())
    root.addHandler(_handler)
    root.setLevel(logging.DEBUG if verbosity >= 2 else max(ours, logging.WARNING))
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(ours)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes (a host that swaps it, pytest, still gets the lines)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


class _Formatter(logging.Formatter):
    """Info lines as they are; others prefixed with their level (never `error:`, which is the one failure line)."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.levelno == logging.INFO:
            return message
        return f"{'warning' if record.levelno >= logging.WARNING else 'debug'}: {message}"
