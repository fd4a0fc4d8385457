"""Claim `launch_overhead`: native dispatch delivers a kernel's arguments and launches it faster than Warp does.

First the echo check (`engine/checks/dispatch_echo.py`): `echo` launched as a plain call, through
`native` and through a binding must write back exactly the arguments sent, on this backend
and on the parity backend.

Then a quick run of `python -m app bench launch` (bench/launch.py), in a child process (the
app never imports bench/, the peers' layer; the command writes its cells as JSON): the 12
cells (six argument shapes, `direct` and `struct` forms), 2,000 launches per cell, the
median of 5 repetitions interleaved with Warp's (5, not the benchmark's 3: a 2,000-launch
loop lasts milliseconds, about one scheduler time slice on a loaded machine, and one
preempted repetition must not decide a cell). Passes when native dispatch beats Warp in every
cell, where Warp is installed and has this device (cpu, cuda); otherwise (Vulkan, or no
Warp) when native dispatch is at least 10x cheaper than the plain Taichi call: the median
over the cells of plain/native is >= 10 and every cell is cheaper than the plain call.
(Not 10x in every cell: where the plain call is cheapest, `kf` direct on Vulkan, a
launch's own runtime cost alone puts the ratio near 10, so the per-cell form would decide
on noise.) `min_ratio` then reports the smallest per-cell factor.
Medians of interleaved repetitions keep both sides under the same load.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from engine import computations
from engine.atomic import write_text
from engine.checks.dispatch_echo import echo_mismatches

LAUNCHES = 2_000
REPEATS = 5
PLAIN_FACTOR = 10.0


def bench_launch(arch: str, launches: int = LAUNCHES, repeats: int = REPEATS) -> dict:
    """`python -m app bench launch` on `arch` in a child process: its JSON record (arch, cells, table, summary)."""
    with tempfile.TemporaryDirectory(prefix="launch-overhead-") as folder:
        path = Path(folder) / "launch.json"
        command = [sys.executable, "-m", "app", "bench", "launch", "--arch", arch, "--launches", str(launches),
                   "--repeats", str(repeats), "--json", str(path), "-q"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"`python -m app bench launch --arch {arch}` exited {done.returncode}: {last}")
        return json.loads(path.read_text())


def run(ctx) -> None:
    echoes = [(ctx.arch, computations.run("dispatch_echo")), (ctx.parity_arch, ctx.parity.call("dispatch_echo"))]
    delivered = True
    for arch, echo in echoes:
        wrong = echo_mismatches(echo)
        delivered &= ctx.check(not wrong, f"native dispatch delivers its arguments exactly as sent on {arch} (echo "
                                          f"kernel: plain call, native, bound){': ' + '; '.join(wrong) if wrong else ''}")
    if not delivered:
        return  # nothing to time: `bench launch` refuses launches that lose their arguments
    record = bench_launch(ctx.arch)
    cells, summary = record["cells"], record["summary"]
    write_text(ctx.out / "launch_overhead.md", record["table"] + "\n")
    ctx.metric(cells=len(cells), median_us_native=round(statistics.median(c["native_us"] for c in cells), 3),
               median_us_plain=round(statistics.median(c["plain_us"] for c in cells), 3))
    compared = [cell for cell in cells if cell["warp_us"] is not None]
    if compared:
        ratios = [cell["warp_us"] / cell["native_us"] for cell in compared]  # > 1: native dispatch is faster
        won = sum(ratio > 1 for ratio in ratios)
        ctx.metric(cells_won=won, min_ratio=round(min(ratios), 2),
                   median_us_warp=round(statistics.median(c["warp_us"] for c in compared), 3))
        lost = ", ".join(f"{c['shape']}/{c['form']}" for c, ratio in zip(compared, ratios) if ratio <= 1)
        ctx.check(won == len(compared), f"native dispatch faster than Warp on {ctx.arch} in {won} of "
                                        f"{len(compared)} cells{f' (lost: {lost})' if lost else ''}: {summary}")
        return
    factors = [cell["plain_us"] / cell["native_us"] for cell in cells]
    median_factor = statistics.median(factors)
    won = sum(factor > 1 for factor in factors)
    ctx.metric(cells_won=won, min_ratio=round(min(factors), 2), median_ratio=round(median_factor, 2),
               median_us_warp=None)
    ctx.check(won == len(cells) and median_factor >= PLAIN_FACTOR,
              f"no Warp for {ctx.arch}: native dispatch {median_factor:.0f}x cheaper than the plain call (median "
              f"over cells; >= {PLAIN_FACTOR:g}x), cheaper in {won} of {len(cells)} cells: {summary}")
