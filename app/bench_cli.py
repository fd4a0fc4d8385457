"""Benchmarks beside Warp (and Open3D): `python -m app bench NAME|all [flags]` prints each one's table."""
from __future__ import annotations

import argparse
import importlib

BENCHMARKS: dict[str, str] = {  # name -> "module:function"
    "launch": "bench.launch:main",
    "closest": "bench.closest:main",
    "fit_overhead": "bench.fit_overhead:main",
    "fit_iteration": "bench.fit_iteration:main",
    "raymarch": "bench.raymarch:main",
    "gui_fps": "bench.gui_fps:main",
    "batch": "bench.batch:main",
    "invert": "bench.invert:main",
    "invert_sweep": "bench.invert_sweep:main",
}
NEEDS_DISPLAY = {"gui_fps"}  # left out of `all`, which must run on a headless GPU machine
NEEDS_RAY = {"batch"}  # left out of `all` too: the GPU check's wheels carry no Ray (the `batch` extra)
# left out of `all` too: a CPU-only comparison (Dr.Jit LLVM), minutes of compiles and children
CPU_PEER = {"invert", "invert_sweep"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """NAME and the benchmark's own flags (`python -m app bench NAME --help` lists them)."""
    parser.add_argument("name", choices=[*BENCHMARKS, "all"], metavar="NAME",
                        help=f"one of {', '.join(BENCHMARKS)}, or all (every one that needs no display and no Ray)")
    parser.add_argument("flags", nargs=argparse.REMAINDER, metavar="...",
                        help="the benchmark's flags (NAME --help lists them)")


def run(args: argparse.Namespace) -> int:
    status = 0
    skipped = NEEDS_DISPLAY | NEEDS_RAY | CPU_PEER
    for each in [each for each in BENCHMARKS if each not in skipped] if args.name == "all" else [args.name]:
        module, function = BENCHMARKS[each].split(":")
        status |= getattr(importlib.import_module(module), function)(args.flags)
    return status
