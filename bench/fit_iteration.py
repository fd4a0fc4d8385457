"""`python -m app bench fit_iteration [--arch A] [--targets T,...] [--subdiv S] [--iters N] [--rounds R] [--out DIR]`.

Time per shape-fit iteration (`ShapeFit.step`: BVH refit and queries, the taped Chamfer terms,
backward, Adam, smoothing), timed as the fit runs: blocks of `sync_every` steps, each ending where the fit
reads its losses and waits for the device (an iteration alone waits for nothing: on a GPU a per-step
sync would time the host's round trips, not the fit), with the BVH queries warm-started from the previous
iteration's faces (the default) and cold, on the bundled targets and on spot split to 254,080 faces (the "spot254k"
mesh of `bench closest`, written to a temporary OBJ). Each round builds one fit per side and runs
it for --iters iterations at the default settings; reported: the median iteration over the
iterations after the first WARMUP (the first ones load kernels), its spread over the rounds, the
ratio, and the orders of magnitude each loss fell. Both sides' answers are checked first: the same
distances (a warm search returns the cold search's distance), and no misses.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import bench_parser, emit, machine_load, median_spread
from engine.errors import UserError

TARGETS = ("spot", "blub", "penguin", "spot254k")
WARMUP = 50  # iterations left out of the median (kernel loads, the first re-sorts)


def _target_path(name: str, folder: Path) -> str:
    """A fit target: a bundled name as is; spot254k written once to `folder` as OBJ."""
    if name != "spot254k":
        return name
    from bench.closest_data import mesh_named
    from engine.mesh_io import write_mesh

    path = folder / "spot254k.obj"
    if not path.exists():
        write_mesh(path, *mesh_named(name))
    return str(path)


def _run(target: str, subdiv: int, iters: int, warm: bool) -> tuple[list[float], float, int]:
    """(seconds per iteration, orders the loss fell, misses) of one fit."""
    import taichi as ti

    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit(target, subdiv, schedule_iters=iters)
    fit.terms["chamfer"].warm_start = warm
    times = []
    try:
        for first in range(0, iters, fit.sync_every):  # a block ends where the fit reads its losses: a wait
            block = min(fit.sync_every, iters - first)
            start = time.perf_counter()
            for _ in range(block):
                fit.step()
            ti.sync()
            times += [(time.perf_counter() - start) / block] * block
        return times, fit.orders(), fit.misses()
    finally:
        fit.destroy()


def _same_answers(target: str, subdiv: int) -> None:
    """A warm and a cold correspondence at the same vertices find the same distances (the target
    samples' to the source mesh: the last query of a correspondence writes `query_dist2`)."""
    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit(target, subdiv)
    try:
        for _ in range(5):
            fit.step()  # the held faces are now last iteration's: real hints
        dist2 = {}
        for warm in (True, False):
            fit.terms["chamfer"].warm_start = warm
            fit.terms["chamfer"].correspond()  # outside a tape: just the untaped work
            dist2[warm] = fit.terms["chamfer"].query_dist2.to_numpy()
        scale = max(float(np.max(np.abs(dist2[False]))), 1e-30)
        if float(np.max(np.abs(dist2[True] - dist2[False]))) > 1e-6 * scale or fit.misses():
            raise RuntimeError(f"bench fit_iteration: warm and cold queries disagree on {target}")
    finally:
        fit.destroy()


def main(argv: list[str]) -> int:
    parser = bench_parser("fit_iteration", __doc__)
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)} "
                        "or mesh files (default: all)")
    parser.add_argument("--subdiv", type=int, default=4, help="icosphere subdivision (default 4)")
    parser.add_argument("--iters", type=int, default=400, help=f"iterations per fit (default 400, > {WARMUP})")
    parser.add_argument("--rounds", type=int, default=2, help="fits per side and target (default 2)")
    options = parser.parse_args(argv)
    if options.iters <= WARMUP or options.rounds < 1:
        raise UserError(f"--iters must exceed {WARMUP} and --rounds be at least 1 "
                        f"(got {options.iters}, {options.rounds})")
    from engine import backend
    from engine.progress import bar

    arch = backend.init(options.arch).name
    targets = [name for name in options.targets.split(",") if name]
    rows = []
    with tempfile.TemporaryDirectory() as folder, bar(total=len(targets) * 2 * options.rounds,
                                                       desc="fits") as progress:
        for name in targets:
            target = _target_path(name, Path(folder))
            _same_answers(target, options.subdiv)
            medians: dict[bool, list[float]] = {True: [], False: []}
            orders: dict[bool, float] = {}
            for _ in range(options.rounds):
                for warm in (True, False):  # alternating, so both sides see the same machine load
                    times, orders[warm], misses = _run(target, options.subdiv, options.iters, warm)
                    if misses:
                        raise RuntimeError(f"bench fit_iteration: {misses} queries without an answer on {name}")
                    medians[warm].append(statistics.median(times[WARMUP:]) * 1e3)
                    progress.update(1)
            rows.append((name, medians, orders))
    lines = [f"arch {arch}; shape fit, subdivision {options.subdiv}, {options.iters} iterations, median iteration "
             f"after the first {WARMUP}, median of {options.rounds} fits per side (± half their spread); "
             f"{machine_load()}", "",
             "| target | warm (ms / iteration) | cold | cold / warm | orders: warm / cold |", "|---|---:|---:|---:|---|"]
    for name, medians, orders in rows:
        (warm, warm_spread), (cold, cold_spread) = median_spread(medians[True]), median_spread(medians[False])
        lines.append(f"| {name} | {warm:.2f} ±{warm_spread * 50:.0f}% | {cold:.2f} ±{cold_spread * 50:.0f}% | "
                     f"{cold / warm:.2f} | {orders[True]:.3f} / {orders[False]:.3f} |")
    emit("\n".join(lines), "fit_iteration", options.out)
    return 0
