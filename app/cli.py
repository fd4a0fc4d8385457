"""Command line: `python -m app [--headless] ...` and its subcommands.

Subcommands are modules with a `main(argv) -> int`, imported only when used so that
`--help` and error paths stay fast. A `UserError` anywhere becomes one line on
stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from engine.backend import ARCH_CHOICES, ARCH_ENV
from engine.errors import UserError

SUBCOMMANDS: dict[str, str] = {  # name -> "module:function" taking argv, returning an exit code
    "bench": "app.bench:main",
    "render": "app.scenes.render_cli:main",
    "fit": "app.scenes.shape_fit:main",
    "invert": "app.scenes.invert:main",
}


def add_arch_argument(parser: argparse.ArgumentParser) -> None:
    """The `--arch` flag every command takes (default: $SHANNON_ARCH, else auto)."""
    parser.add_argument("--arch", choices=None, default=None, metavar="|".join(ARCH_CHOICES),
                        help=f"backend to run on (default: ${ARCH_ENV}, else auto: CUDA if present, else cpu)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m app",
        description="shannon-autograd: differentiable graphics on Taichi. Without --headless, opens the desktop app.",
        epilog="subcommands: " + (", ".join(SUBCOMMANDS) or "none yet") + " (python -m app SUBCOMMAND --help)",
    )
    parser.add_argument("--headless", action="store_true", help="run every acceptance claim, write a report, exit")
    add_arch_argument(parser)
    parser.add_argument("--parity-arch", default=None, metavar="|".join(ARCH_CHOICES[1:]),
                        help="second backend for parity checks (default: cpu, or vulkan when --arch is cpu)")
    parser.add_argument("--out", default="out", help="output folder (default: out/)")
    parser.add_argument("--only", default=None, help="comma-separated claim names to run")
    gui = parser.add_argument_group("desktop app test hooks")
    gui.add_argument("--frames", type=int, default=None, metavar="N",
                     help="run N frames once the panels show live content, then close (with --screenshot: save it)")
    gui.add_argument("--screenshot", default=None, metavar="PATH", help="save a PNG of the whole window on close")
    gui.add_argument("--panel", default=None, metavar="NAME", help="show only this panel: raymarch, fit, parity, tape or invert")
    gui.add_argument("--size", default="1280x800", metavar="WxH", help="window size (default 1280x800)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] in SUBCOMMANDS:
            module, function = SUBCOMMANDS[argv[0]].split(":")
            return getattr(importlib.import_module(module), function)(argv[1:])
        args = _parser().parse_args(argv)
        if args.headless:
            from app.headless import run_headless

            only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else None
            return run_headless(args.arch, args.parity_arch, args.out, only)
        from app.ui.app import launch_app  # imports imgui only once the window opens

        return launch_app(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
