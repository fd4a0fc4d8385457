"""Command line: `python -m app [--headless] [flags]` and `python -m app COMMAND [flags]`.

Without a command it opens the desktop app (`--headless`: runs the acceptance claims);
`python -m app --help` lists the flags by mode and the commands, and
`python -m app COMMAND --help` every flag of one command.

Adding a command is one row in `SUBCOMMANDS`, in one of two forms:

- `"name": "package.module"`: the module has `add_arguments(parser)`, which adds its flags
  to an `argparse` subparser, and `run(args) -> int`. The module is imported only when the
  command runs or its `--help` is asked for, so `python -m app --help` and error paths stay
  fast; the listing's summary is the first paragraph of the module's docstring.
- `"name": "package.module:main"`: a `main(argv) -> int` that parses its own arguments
  (build its parser with `app.flags.command_parser(name, doc)` to get the conventions below).

This module only parses the top level and dispatches; the flags and conventions every
command shares live in `app.flags`. Conventions every command gets: `-v` (more detail)
and `-q` (no progress bars, warnings only) set the `logging` level; results go to stdout,
logs to stderr; a mistyped flag or command name is told the closest one. Every failure is
one `error: ...` line on stderr and an exit code (`engine.errors`): a `UserError`
anywhere (an argparse error too) exits 2; SIGINT/SIGTERM exit 130 (commands that can,
write their work so far first); any other exception is an internal error: exit 3, its
full traceback in a crash log that the line names (`app.crash_log`).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from typing import Callable

from app.flags import (VERBOSITY_FLAGS, OneLineParser, add_arch_argument, add_verbosity_arguments, configure_logging,
                       summary_of)
from app.version import version
from engine.backend import ARCH_CHOICES
from engine.errors import EXIT_INTERNAL, Interrupted, UserError
from engine.interrupt import raise_on_signals

SUBCOMMANDS: dict[str, str] = {  # name -> "module" (add_arguments + run) or "module:main" (parses argv itself)
    "bench": "app.bench_cli",
    "render": "app.scenes.render_cli",
    "fit": "app.scenes.fit_cli",
    "batch": "app.batch.cli:main",
    "invert": "app.scenes.invert:main",
}


class _LazyCommandParser(OneLineParser):
    """A subcommand's parser that imports its module and adds its flags only when it is used."""

    populate: Callable[[argparse.ArgumentParser], None] | None = None

    def _ensure(self) -> None:
        if self.populate is not None:
            populate, self.populate = self.populate, None
            populate(self)

    def parse_known_args(self, args=None, namespace=None):
        self._ensure()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._ensure()
        return super().format_help()


def _module_summary(module: str) -> str:
    """The first docstring line of `module`, read from its source without importing it (which may import Taichi)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return ""
    with open(spec.origin, encoding="utf-8") as f:
        return summary_of(ast.get_docstring(ast.parse(f.read())))


def _populator(module_name: str) -> Callable[[argparse.ArgumentParser], None]:
    def populate(parser: argparse.ArgumentParser) -> None:
        module = importlib.import_module(module_name)
        parser.description = module.__doc__
        module.add_arguments(parser)
        add_verbosity_arguments(parser, default=argparse.SUPPRESS)
        parser.set_defaults(run=module.run)
    return populate


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m app",
        description="shannon-autograd: differentiable graphics on Taichi. Without a command, opens the desktop app; "
                    "--headless runs every acceptance claim instead.",
        epilog="python -m app COMMAND --help: every flag of one command. Exit codes: 0 ok, 1 a claim or result is "
               "bad, 2 bad input or unusable machine, 3 internal error (the message names its log), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"shannon-autograd {version()}")
    both = parser.add_argument_group("backends (headless and desktop app)")
    add_arch_argument(both)
    both.add_argument("--parity-arch", default=None, metavar="|".join(ARCH_CHOICES[1:]),
                      help="second backend for parity checks (default: cpu, or vulkan when --arch is cpu)")
    headless = parser.add_argument_group("headless mode (--headless)")
    headless.add_argument("--headless", action="store_true", help="run every acceptance claim, write a report, exit")
    headless.add_argument("--out", default="out", metavar="DIR", help="output folder for report.json and renders "
                          "(default: out/)")
    headless.add_argument("--only", default=None, metavar="NAMES", help="comma-separated claim names to run")
    gui = parser.add_argument_group("desktop app (the default mode): test hooks")
    gui.add_argument("--frames", type=int, default=None, metavar="N",
                     help="run N frames once the panels show live content, then close (with --screenshot: save it)")
    gui.add_argument("--screenshot", default=None, metavar="PATH", help="save a PNG of the whole window on close")
    gui.add_argument("--panel", default=None, metavar="NAME", help="show only this panel: raymarch, fit, parity, tape or invert")
    gui.add_argument("--size", default="1280x800", metavar="WxH", help="window size (default 1280x800)")
    add_verbosity_arguments(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                                     parser_class=_LazyCommandParser)
    for name, target in SUBCOMMANDS.items():
        module = target.split(":")[0]
        sub = commands.add_parser(name, help=_module_summary(module), prog=f"python -m app {name}",
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        if ":" not in target:
            sub.populate = _populator(module)
    return parser


HEADLESS_ONLY = ("--out", "--only")
WINDOW_ONLY = ("--frames", "--screenshot", "--panel", "--size")


def _check_mode_flags(args: argparse.Namespace, argv: list[str]) -> None:
    """A flag of the other mode would be ignored silently: refuse it instead."""
    given = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    wrong = [flag for flag in (WINDOW_ONLY if args.headless else HEADLESS_ONLY) if flag in given]
    if wrong:
        mode = "the desktop app (without --headless)" if args.headless else "--headless"
        raise UserError(f"python -m app: {', '.join(wrong)} only applies to {mode} (see --help)")


def _split_verbosity(argv: list[str]) -> tuple[int, list[str]]:
    """Leading -v/-q flags (before a command) and the rest of argv."""
    verbosity, i = 0, 0
    while i < len(argv) and argv[i] in VERBOSITY_FLAGS:
        verbosity += VERBOSITY_FLAGS[argv[i]]
        i += 1
    return verbosity, argv[i:]


def _dispatch(argv: list[str]) -> int:
    verbosity, rest = _split_verbosity(argv)
    configure_logging(verbosity)
    if rest and ":" in SUBCOMMANDS.get(rest[0], ""):
        module, function = SUBCOMMANDS[rest[0]].split(":")
        return getattr(importlib.import_module(module), function)(rest[1:])
    args = _parser().parse_args(argv)
    configure_logging(getattr(args, "verbosity", 0))
    if args.command is not None:
        if not rest or rest[0] != args.command:
            raise UserError(f"python -m app: put the command first, then its flags: python -m app {args.command} ...")
        return args.run(args)
    _check_mode_flags(args, argv)
    if args.headless:
        from app.headless import run_headless

        return run_headless(args.arch, args.parity_arch, args.out, args.only)
    from app.ui.app import launch_app  # imports imgui only once the window opens

    return launch_app(args)


def main(argv: list[str] | None = None) -> int:
    """`python -m app ...`: run it and return the exit code (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        with raise_on_signals():
            return _dispatch(argv)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (Interrupted, KeyboardInterrupt) as exc:
        print(f"error: {exc if isinstance(exc, Interrupted) else Interrupted('SIGINT')}", file=sys.stderr)
        return Interrupted.exit_code
    except Exception as exc:  # a bug: one line here, the whole story in the crash log
        from app import crash_log

        path = crash_log.write(crash_log.format_exception(exc), f"internal error: {exc!r}")
        summary = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"error: internal error ({type(exc).__name__}{': ' + summary if summary else ''}); "
              f"full traceback in {path}", file=sys.stderr)
        return EXIT_INTERNAL
