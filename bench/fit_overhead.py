"""`python -m app bench fit_overhead [--arch A] [--subdiv S] [--iters N] [--out DIR]`: the shape fit's Python overhead.

The issue-7 goal: time per shape-fit iteration minus the time its kernels run, under 10 % of
the iteration at the default size (spot, subdivision 3, ShapeFit defaults). Kernel time comes
from Taichi's kernel profiler, which must be switched on when Taichi starts, so this benchmark
starts Taichi itself with the settings of engine.backend (fast_math off, no fallback) plus the
profiler. The same fit is timed with every launch dispatched natively and with plain calls
(engine.dispatch.use_native), alternating blocks of N iterations, the median block reported.
"""
from __future__ import annotations

import statistics
import time

from bench import bench_parser, emit, machine_load
from engine.errors import UserError

WARMUP = 5
BLOCKS = 3


def _block(fit, iters: int) -> tuple[float, float]:
    """(wall seconds, kernel seconds) per iteration over `iters` iterations."""
    import taichi as ti

    ti.sync()
    ti.profiler.clear_kernel_profiler_info()
    start = time.perf_counter()
    for _ in range(iters):
        fit.step()
    ti.sync()
    wall = time.perf_counter() - start
    return wall / iters, ti.profiler.get_kernel_profiler_total_time() / iters


def main(argv: list[str]) -> int:
    parser = bench_parser("fit_overhead", __doc__)
    parser.add_argument("--target", default="spot", help="shape-fit target (default spot)")
    parser.add_argument("--subdiv", type=int, default=3, help="icosphere subdivision (default 3, the fit's default)")
    parser.add_argument("--iters", type=int, default=20, help="iterations per timed block (default 20)")
    options = parser.parse_args(argv)
    if options.iters < 1:
        raise UserError(f"--iters must be at least 1 (got {options.iters})")
    from engine import backend

    arch = backend.init(options.arch, kernel_profiler=True).name

    from app.scenes.shape_fit import ShapeFit
    from engine.dispatch import use_native
    from engine.progress import bar

    fit = ShapeFit(options.target, subdiv=options.subdiv)
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        for native in (True, False):
            use_native(native)
            _block(fit, WARMUP)
        with bar(total=2 * BLOCKS, desc="fit blocks") as progress:
            for _ in range(BLOCKS):
                for native in (True, False):
                    use_native(native)
                    results[native].append(_block(fit, options.iters))
                    progress.update(1)
    finally:
        use_native(True)
        fit.destroy()
    lines = [f"arch {arch}; shape fit {options.target}, subdivision {options.subdiv}, {options.iters} iterations "
             f"per block, median of {BLOCKS} blocks; {machine_load()}",
             "", "| dispatch | iteration (ms) | kernels (ms) | Python overhead (ms) | overhead share |",
             "|---|---:|---:|---:|---:|"]
    for native in (True, False):
        wall = statistics.median(w for w, _ in results[native])
        kernels = statistics.median(k for _, k in results[native])
        lines.append(f"| {'native' if native else 'plain call'} | {wall * 1e3:.2f} | {kernels * 1e3:.2f} | "
                     f"{(wall - kernels) * 1e3:.2f} | {100 * (wall - kernels) / wall:.1f} % |")
    text = "\n".join(lines)
    emit(text, "fit_overhead", options.out)
    return 0
