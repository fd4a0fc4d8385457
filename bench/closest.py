"""`python -m app bench closest`: closest-point queries per second, ours against Warp's wp.Mesh.

Options: [--arch A] [--repeats R] [--leaf-size L] [--no-warp].

Mesh: the 20,480-triangle icosphere (engine.meshgen.icosphere(5)). Queries: 128,
1,024 and 16,384 points uniform in [-2, 2]^3 (seeded). Ours: `TriangleBVH.query`
(one launch per batch); Warp: `wp.Mesh` + `wp.mesh_query_point_no_sign` on the same
mesh and points, in the same process on the same device (Warp has no Vulkan backend:
with --arch vulkan only ours is timed).

Before timing, every batch is validated: our squared distances equal the brute-force
kernel's (first 1,024 points, 1e-6 relative: the same arithmetic) and Warp's (every
point: distances within 1e-6 x max(1, distance); Warp evaluates the closest point with
different float32 arithmetic, and near the surface squared distances lose relative
precision to cancellation on both sides), with no misses and no stack overflows.
Timing: each repetition launches a batch enough times to last ~0.2 s and
synchronises once at the end; ours and Warp's alternate repetition by repetition
so both see the same machine load; the median repetition is reported,
as wall-clock throughput and as process CPU time per query (all threads summed: the
work per query, which other processes' load barely changes).
Build: ours is `TriangleBVH.rebuild()` (host median-split sort, upload, device
refit), Warp's is the `wp.Mesh` constructor; refit: `refit()` on both.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import numpy as np

from bench import bench_parser, emit, machine_load
from engine.errors import UserError

SIZES = (128, 1024, 16384)
BRUTE_CHECK = 1024  # points per batch checked against the brute-force oracle
WARP_DEVICE = {"cpu": "cpu", "cuda": "cuda:0"}
TARGET_S = 0.2  # per repetition


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)))


def _distance_err(dist2_a: np.ndarray, dist2_b: np.ndarray) -> float:
    """max |d_a - d_b| / max(1, d) over the points, d the distance (the mesh is ~1 across)."""
    a, b = np.sqrt(np.asarray(dist2_a, np.float64)), np.sqrt(np.asarray(dist2_b, np.float64))
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.maximum(a, b))))


def _timed(run: Callable[[], None], sync: Callable[[], None], calls: int) -> float:
    """Wall seconds per call of `run`, over `calls` calls and one synchronisation."""
    return _timed_both(run, sync, calls)[0]


def _timed_both(run: Callable[[], None], sync: Callable[[], None], calls: int) -> tuple[float, float]:
    """(wall, process CPU) seconds per call of `run`: CPU time sums every thread of this
    process, so it measures work per query even when other processes load the machine."""
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        run()
    sync()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def _calls_for(run: Callable[[], None], sync: Callable[[], None]) -> int:
    once = _timed(run, sync, 1)
    return max(1, min(2000, math.ceil(TARGET_S / max(once, 1e-7))))


def _warp(vertices: np.ndarray, faces: np.ndarray, arch: str, wanted: bool):
    """Warp's mesh on this backend, or None with one line saying why not."""
    if not wanted:
        return None
    if arch not in WARP_DEVICE:
        print(f"warp: no {arch} backend; timing ours only")
        return None
    try:
        from bench.closest_warp import WarpMesh
    except ImportError as exc:
        print(f"warp: not importable ({exc}); timing ours only (pip install warp-lang)")
        return None
    return WarpMesh(vertices, faces, WARP_DEVICE[arch])


def measure(arch: str, repeats: int, leaf_size: int | None, use_warp: bool, progress) -> dict:
    import taichi as ti

    from engine.bvh import DEFAULT_LEAF_SIZE, QueryBuffers, TriangleBVH
    from engine.meshgen import icosphere

    leaf_size = leaf_size or DEFAULT_LEAF_SIZE
    vertices, faces = icosphere(5)
    bvh = TriangleBVH.build(vertices, faces, leaf_size=leaf_size)
    warp = _warp(vertices, faces, arch, use_warp)
    rng = np.random.default_rng(0)
    rows = []
    for n in SIZES:
        points = rng.uniform(-2.0, 2.0, (n, 3)).astype(np.float32)
        buffers = QueryBuffers(n)
        buffers.load(points)

        def ours() -> None:
            bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n)

        ours()
        found = buffers.results(n)
        bvh.check_overflow()
        oracle = bvh.brute_force(points[:BRUTE_CHECK])["dist2"]
        if bvh.counters()["misses"] or _rel_err(found["dist2"][:BRUTE_CHECK], oracle) > 1e-6:
            raise RuntimeError(f"{n} queries: our BVH disagrees with the brute-force oracle; not timing")
        row = {"n": n, "brute_rel_err": _rel_err(found["dist2"][:BRUTE_CHECK], oracle)}
        if warp:
            warp.load(points)
            warp.query(n)
            theirs = warp.results(n)
            row["warp_err"] = _distance_err(found["dist2"], theirs["dist2"])
            if (theirs["face"] < 0).any() or row["warp_err"] > 1e-6:
                raise RuntimeError(f"{n} queries: Warp's distances differ from ours by {row['warp_err']:.2g}")
        ours_calls = _calls_for(ours, ti.sync)
        warp_calls = _calls_for(lambda: warp.query(n), warp.synchronize) if warp else 0
        ours_s, warp_s = [], []
        for _ in range(repeats):
            ours_s.append(_timed_both(ours, ti.sync, ours_calls))
            if warp:
                warp_s.append(_timed_both(lambda: warp.query(n), warp.synchronize, warp_calls))
            progress.update(1)
        row["ours_qps"] = n / statistics.median(wall for wall, _ in ours_s)
        row["ours_cpu_us"] = statistics.median(cpu for _, cpu in ours_s) / n * 1e6
        row["warp_qps"] = n / statistics.median(wall for wall, _ in warp_s) if warp else None
        row["warp_cpu_us"] = statistics.median(cpu for _, cpu in warp_s) / n * 1e6 if warp else None
        rows.append(row)
        buffers.group.destroy()
    build, refit, warp_build, warp_refit = [], [], [], []
    for _ in range(repeats):
        build.append(_timed(bvh.rebuild, ti.sync, 1))
        refit.append(_timed(bvh.refit, ti.sync, 20))
        if warp:
            start = time.perf_counter()
            warp.mesh = warp.build()
            warp_build.append(time.perf_counter() - start)
            warp_refit.append(_timed(warp.refit, warp.synchronize, 20))
        progress.update(1)
    median_ms = lambda values: statistics.median(values) * 1e3 if values else None  # noqa: E731
    bvh.destroy()
    return {"rows": rows, "build_ms": median_ms(build), "refit_ms": median_ms(refit),
            "warp_build_ms": median_ms(warp_build), "warp_refit_ms": median_ms(warp_refit),
            "depth": bvh.depth, "leaf_size": leaf_size, "faces": len(faces)}


def table(result: dict, arch: str, repeats: int) -> str:
    fmt = lambda value, spec: "-" if value is None else format(value, spec)  # noqa: E731
    lines = [f"closest-point queries, icosphere(5) ({result['faces']:,} triangles), {arch}, "
             f"leaf size {result['leaf_size']}, depth {result['depth']}, median of {repeats}; {machine_load()}",
             "| queries | ours (M queries/s) | Warp (M queries/s) | ours / Warp "
             "| ours CPU us/query | Warp CPU us/query | dist2 rel err vs brute | distance err vs Warp |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        ratio = row["ours_qps"] / row["warp_qps"] if row["warp_qps"] else None
        warp_mqps = row["warp_qps"] / 1e6 if row["warp_qps"] else None
        lines.append(f"| {row['n']:,} | {row['ours_qps'] / 1e6:.3f} | {fmt(warp_mqps, '.3f')} | {fmt(ratio, '.2f')} "
                     f"| {row['ours_cpu_us']:.2f} | {fmt(row['warp_cpu_us'], '.2f')} | {row['brute_rel_err']:.2g} "
                     f"| {fmt(row.get('warp_err'), '.2g')} |")
    lines += ["", "| BVH | ours (ms) | Warp (ms) |", "|---|---:|---:|",
              f"| build | {result['build_ms']:.2f} | {fmt(result['warp_build_ms'], '.2f')} |",
              f"| refit | {result['refit_ms']:.3f} | {fmt(result['warp_refit_ms'], '.3f')} |"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = bench_parser("closest", __doc__)
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (the median is reported)")
    parser.add_argument("--leaf-size", type=int, default=None,
                        help="most triangles per BVH leaf (2..64; default: engine.bvh.DEFAULT_LEAF_SIZE)")
    parser.add_argument("--no-warp", action="store_true", help="time ours only")
    options = parser.parse_args(argv)
    if options.repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {options.repeats})")

    from engine import backend
    from engine.progress import bar

    arch = backend.init(options.arch).name
    with bar(total=(len(SIZES) + 1) * options.repeats, desc="closest-point bench") as progress:
        result = measure(arch, options.repeats, options.leaf_size, not options.no_warp, progress)
    emit(table(result, arch, options.repeats), "closest", options.out)
    return 0
