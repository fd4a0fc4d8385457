"""`python -m app bench closest`: closest-point queries per second, ours against Warp's wp.Mesh and Open3D.

Options: [--arch A] [--repeats R] [--leaf-size L] [--no-warp] [--no-open3d].

Mesh: the 20,480-triangle icosphere (engine.meshgen.icosphere(5)). Queries: 128,
1,024 and 16,384 points uniform in [-2, 2]^3 (seeded). Ours: `TriangleBVH.query`
(one launch per batch); Warp: `wp.Mesh` + `wp.mesh_query_point_no_sign` on the same
mesh and points, in the same process on the same device (Warp has no Vulkan backend:
with --arch vulkan only ours is timed); with --arch cpu also Open3D's Embree-based
`RaycastingScene.compute_closest_points` (all threads; optional: `pip install -e '.[open3d]'`).

Before timing, every batch is validated: our squared distances equal the brute-force
kernel's (first 1,024 points, 1e-6 relative: the same arithmetic) and each peer's (every
point: distances within 1e-6 x max(1, distance); the peers evaluate the closest point with
different float32 arithmetic, and near the surface squared distances lose relative
precision to cancellation on both sides), with no misses and no stack overflows.
Timing: each repetition launches a batch enough times to last ~0.2 s and
synchronises once at the end; ours and the peers alternate repetition by repetition
so all see the same machine load; the median repetition is reported,
as wall-clock throughput and as process CPU time per query (all threads summed: the
work per query, which other processes' load barely changes).
Build: ours is `TriangleBVH.rebuild()` (host median-split sort, upload, device
refit), Warp's is the `wp.Mesh` constructor, Open3D's a new scene and its first query
(Embree commits lazily); refit: `refit()` (Open3D has none).
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


def _peers(vertices: np.ndarray, faces: np.ndarray, arch: str, wanted: set[str]) -> dict:
    """The peers that can run beside ours here, by display name; one line for each that cannot."""
    peers = {}
    if "warp" in wanted:
        if arch not in WARP_DEVICE:
            print(f"warp: no {arch} backend; not timed")
        else:
            try:
                from bench.closest_warp import WarpMesh
            except ImportError as exc:
                print(f"warp: not importable ({exc}); not timed (pip install warp-lang)")
            else:
                peers["Warp"] = WarpMesh(vertices, faces, WARP_DEVICE[arch])
    if "open3d" in wanted:
        if arch != "cpu":
            print(f"open3d: runs on the CPU only; not timed beside ours on {arch} (use --arch cpu)")
        else:
            try:
                from bench.closest_open3d import Open3DScene
            except (ImportError, OSError) as exc:  # OSError: a system library it needs is missing
                print(f"open3d: not importable ({exc}); not timed "
                      f"(pip install -e '.[open3d]'; on Debian it also needs libusb-1.0-0)")
            else:
                peers["Open3D"] = Open3DScene(vertices, faces)
    return peers


def measure(arch: str, repeats: int, leaf_size: int | None, wanted: set[str], progress) -> dict:
    import taichi as ti

    from engine.triangle_bvh import DEFAULT_LEAF_SIZE, QueryBuffers, TriangleBVH
    from engine.meshgen import icosphere

    leaf_size = leaf_size or DEFAULT_LEAF_SIZE
    vertices, faces = icosphere(5)
    bvh = TriangleBVH.build(vertices, faces, leaf_size=leaf_size)
    peers = _peers(vertices, faces, arch, wanted)
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
        row = {"n": n, "brute_rel_err": _rel_err(found["dist2"][:BRUTE_CHECK], oracle), "peers": {}}
        for name, peer in peers.items():
            peer.load(points)
            peer.query(n)
            theirs = peer.results(n)
            err = _distance_err(found["dist2"], theirs["dist2"])
            if (theirs["face"] < 0).any() or err > 1e-6:
                raise RuntimeError(f"{n} queries: {name}'s distances differ from ours by {err:.2g}; not timing")
            row["peers"][name] = {"err": err}
        runs = {"ours": (ours, ti.sync)} | {name: (lambda peer=peer: peer.query(n), peer.synchronize)
                                            for name, peer in peers.items()}
        calls = {name: _calls_for(run, sync) for name, (run, sync) in runs.items()}
        times: dict[str, list] = {name: [] for name in runs}
        for _ in range(repeats):  # alternate sides every repetition: all see the same machine load
            for name, (run, sync) in runs.items():
                times[name].append(_timed_both(run, sync, calls[name]))
            progress.update(1)
        for name, measured in times.items():
            qps = n / statistics.median(wall for wall, _ in measured)
            cpu_us = statistics.median(cpu for _, cpu in measured) / n * 1e6
            target = row if name == "ours" else row["peers"][name]
            target.update(qps=qps, cpu_us=cpu_us)
        rows.append(row)
        buffers.group.destroy()
    build = {name: [] for name in ["ours", *peers]}
    refit = {name: [] for name in ["ours", *(name for name, peer in peers.items() if hasattr(peer, "refit"))]}
    for _ in range(repeats):
        build["ours"].append(_timed(bvh.rebuild, ti.sync, 1))
        refit["ours"].append(_timed(bvh.refit, ti.sync, 20))
        for name, peer in peers.items():
            build[name].append(_timed(peer.build, peer.synchronize, 1))
            if name in refit:
                refit[name].append(_timed(peer.refit, peer.synchronize, 20))
        progress.update(1)
    bvh.destroy()
    median_ms = lambda table: {name: statistics.median(values) * 1e3 for name, values in table.items()}  # noqa: E731
    return {"rows": rows, "peers": list(peers), "build_ms": median_ms(build), "refit_ms": median_ms(refit),
            "depth": bvh.depth, "leaf_size": leaf_size, "faces": len(faces)}


def table(result: dict, arch: str, repeats: int) -> str:
    fmt = lambda value, spec: "-" if value is None else format(value, spec)  # noqa: E731
    peers = result["peers"]
    head = (["queries", "ours (M queries/s)"] + [f"{name} (M queries/s)" for name in peers]
            + [f"ours / {name}" for name in peers] + ["ours CPU us/query"]
            + [f"{name} CPU us/query" for name in peers] + ["dist2 rel err vs brute"]
            + [f"distance err vs {name}" for name in peers])
    lines = [f"closest-point queries, icosphere(5) ({result['faces']:,} triangles), {arch}, "
             f"leaf size {result['leaf_size']}, depth {result['depth']}, median of {repeats}; {machine_load()}",
             "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for row in result["rows"]:
        theirs = [row["peers"][name] for name in peers]
        cells = ([f"{row['n']:,}", f"{row['qps'] / 1e6:.3f}"] + [f"{peer['qps'] / 1e6:.3f}" for peer in theirs]
                 + [f"{row['qps'] / peer['qps']:.2f}" for peer in theirs] + [f"{row['cpu_us']:.2f}"]
                 + [f"{peer['cpu_us']:.2f}" for peer in theirs] + [f"{row['brute_rel_err']:.2g}"]
                 + [f"{peer['err']:.2g}" for peer in theirs])
        lines.append("| " + " | ".join(cells) + " |")
    names = ["ours", *peers]
    lines += ["", "| BVH | " + " | ".join(f"{name} (ms)" for name in names) + " |", "|---|" + "---:|" * len(names),
              "| build | " + " | ".join(fmt(result["build_ms"].get(name), ".2f") for name in names) + " |",
              "| refit | " + " | ".join(fmt(result["refit_ms"].get(name), ".3f") for name in names) + " |"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = bench_parser("closest", __doc__)
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (the median is reported)")
    parser.add_argument("--leaf-size", type=int, default=None,
                        help="most triangles per BVH leaf (2..64; default: engine.triangle_bvh.DEFAULT_LEAF_SIZE)")
    parser.add_argument("--no-warp", action="store_true", help="do not time Warp")
    parser.add_argument("--no-open3d", action="store_true", help="do not time Open3D")
    options = parser.parse_args(argv)
    if options.repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {options.repeats})")

    from engine import backend
    from engine.progress import bar

    arch = backend.init(options.arch).name
    with bar(total=(len(SIZES) + 1) * options.repeats, desc="closest-point bench") as progress:
        wanted = {name for name, skip in (("warp", options.no_warp), ("open3d", options.no_open3d)) if not skip}
        result = measure(arch, options.repeats, options.leaf_size, wanted, progress)
    emit(table(result, arch, options.repeats), "closest", options.out)
    return 0
