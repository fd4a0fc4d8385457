"""Benchmarks: our kernels beside NVIDIA Warp (optional `bench` extra), same data, same run.

Each module has `main(argv) -> int`, validates equal answers before timing, prints a
table and, with `--out DIR`, also writes it to `DIR/<name>.md`. The helpers below give
every benchmark the same `--arch`/`--out` flags and the same load line.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def bench_parser(name: str, doc: str) -> argparse.ArgumentParser:
    """An argument parser with the flags every benchmark takes: --arch and --out."""
    from app.flags import add_arch_argument, command_parser

    parser = command_parser(f"bench {name}", doc)  # one-line errors, -v/-q, like every command
    add_arch_argument(parser)
    parser.add_argument("--out", default=None, metavar="DIR", type=_checked_folder,
                        help=f"also write the table to DIR/{name}.md")
    return parser


def _checked_folder(path: str) -> str:
    """--out is checked while the flags are parsed: a bad folder fails now, not after the benchmark ran."""
    from engine.output_dir import check_folder

    return str(check_folder(path))


def median_spread(values: list[float]) -> tuple[float, float]:
    """The median and (max - min) / median of repeated measurements."""
    import statistics

    median = statistics.median(values)
    return median, (max(values) - min(values)) / median if median > 0 else 0.0


def machine_load() -> str:
    """The load average: other processes on the machine change every figure."""
    return f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"


def emit(text: str, name: str, out: str | None) -> None:
    """Print a benchmark's table and, with --out, write it atomically to OUT/<name>.md."""
    print(text)
    if out:
        from engine.atomic import write_text

        write_text(Path(out) / f"{name}.md", text + "\n")
