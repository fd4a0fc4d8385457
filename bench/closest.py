"""`python -m app bench closest`: closest-point queries against the fastest libraries, same meshes, same points.

Options: [--arch A] [--repeats R] [--meshes M,...] [--sizes N,...] [--fcpw-simd DIR]
[--no-fcpw-simd] [--no-fcpw] [--no-open3d] [--no-warp] [--no-libigl] [--leaf-size L]

Sides: ours (`TriangleBVH.query`, one call per batch); fcpw built with its SIMD path
(`_fcpwsimd` from --fcpw-simd DIR or $SHANNON_FCPW_SIMD; a line says when it is absent);
fcpw from PyPI (no SIMD); Open3D's Embree `RaycastingScene` (optional extra); Warp's
`wp.Mesh` (also on cuda); libigl's float64 `AABB` (also the correctness oracle). Peers
other than Warp run on the CPU only: with --arch vulkan/cuda they are left out, with a line.

Cells (bench/closest_data.py): the 20,480-triangle icosphere with points uniform in [-2, 2]^3;
spot split to 254,080 and 1,016,320 triangles with points near the surface (noise 1 % of
the box diagonal) and far (uniform in the box grown 2x); 128, 1,024, 16,384 and 262,144
points per batch, seeded.

Validation before any time is printed: every side's distances agree with libigl's float64
distances within ORACLE_TOL x the box diagonal, every point answered; ours also equals the
brute-force kernel (distances within ORACLE_TOL x the diagonal) on the first points of each batch,
with no stack overflow. A side that disagrees stops the run.
Timing: each repetition calls a side's batch query enough times to last ~0.2 s (at least
once) and synchronises once; the sides alternate within every repetition so all see the same
machine load. Reported: the median throughput over the repetitions and its spread
((max - min) / median), process CPU time per query (every thread of this process summed:
the work per query, which other processes' load barely changes) and CPU / wall (the
threads a side kept busy). Build: ours is a fresh `TriangleBVH.build` from the float32 / int32
numpy mesh (arrays allocated, the mesh copied in, median splits and refit on the device; the
previous tree freed), Warp's the `wp.Mesh` constructor, Open3D's a new scene and its first query (Embree commits lazily), fcpw's
`build`, libigl's `AABB.init`; refit: ours `refit()`, Warp's and fcpw's `refit()`.
One query: a one-point call from numpy to numpy (ours: `closest_points`), icosphere.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import numpy as np

from bench import bench_parser, emit, machine_load, median_spread
from bench.closest_data import MESHES, cases, diagonal, mesh_named, queries
from engine.errors import UserError
from engine.parity import distance_error

SIZES = (128, 1024, 16384, 262144)
PEERS = ("fcpw-simd", "fcpw", "Open3D", "Warp", "libigl")
CPU_ONLY = ("fcpw-simd", "fcpw", "Open3D", "libigl")
ORACLE = "libigl"
ORACLE_TOL = 1e-6  # distance error allowed against libigl's float64 answers, times the box diagonal
BRUTE_TESTS = 1 << 27  # point-triangle tests the brute-force check may spend per batch
WARP_DEVICE = {"cpu": "cpu", "cuda": "cuda:0"}
TARGET_S = 0.2  # per side and repetition
ONE_QUERY_S = 0.05  # per side and repetition of the one-query timing


class Ours:
    """`TriangleBVH` behind the peers' interface (build, refit, load, query, results, synchronize)."""

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, leaf_size: int | None) -> None:
        import taichi as ti

        from engine import taichi_private
        from engine.triangle_bvh import DEFAULT_LEAF_SIZE, TriangleBVH

        self.sync = ti.sync
        self.vertices, self.faces = np.asarray(vertices, np.float32), np.asarray(faces, np.int32)
        self.leaf_size = leaf_size or DEFAULT_LEAF_SIZE
        self.bvh = TriangleBVH.build(self.vertices, self.faces, leaf_size=self.leaf_size)
        self.buffers: dict[int, Any] = {}
        self.threads = taichi_private.cpu_threads()

    def build(self) -> None:
        from engine.triangle_bvh import TriangleBVH

        self.bvh.destroy()
        self.bvh = TriangleBVH.build(self.vertices, self.faces, leaf_size=self.leaf_size)

    def refit(self) -> None:
        self.bvh.refit()

    def load(self, points: np.ndarray) -> None:
        from engine.triangle_bvh import QueryBuffers

        buffers = self.buffers.get(len(points)) or QueryBuffers(len(points))
        buffers.load(points)
        self.buffers[len(points)] = buffers

    def query(self, n: int) -> None:
        b = self.buffers[n]
        self.bvh.query(b.points, b.face, b.bary, b.point, b.dist2, n)

    def results(self, n: int) -> dict[str, np.ndarray]:
        self.bvh.check_overflow()
        return self.buffers[n].results(n)

    def one_call(self, point: np.ndarray) -> dict[str, np.ndarray]:
        return self.bvh.closest_points(point)

    def synchronize(self) -> None:
        self.sync()

    def destroy(self) -> None:
        for buffers in self.buffers.values():
            buffers.group.destroy()
        self.bvh.destroy()


def one_call(side: Any, point: np.ndarray) -> dict[str, np.ndarray]:
    """A one-point query as a caller makes it, numpy in and numpy out (a side's own one-point call if it has one)."""
    if hasattr(side, "one_call"):
        return side.one_call(point)
    side.load(point)
    side.query(1)
    return side.results(1)


def _timed(run: Callable[[], None], sync: Callable[[], None], calls: int) -> tuple[float, float]:
    """(wall, process CPU) seconds per call of `run`, over `calls` calls and one synchronisation."""
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        run()
    sync()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def _calls_for(run: Callable[[], None], sync: Callable[[], None], seconds: float = TARGET_S) -> int:
    once = _timed(run, sync, 1)[0]
    return max(1, min(5000, math.ceil(seconds / max(once, 1e-7))))


def _alternating(runs: dict[str, tuple[Callable, Callable]], repeats: int, progress,
                 seconds: float = TARGET_S) -> dict[str, list[tuple[float, float]]]:
    """Per side, `repeats` (wall, cpu) seconds per call; the sides take turns in every repetition."""
    calls = {name: _calls_for(run, sync, seconds) for name, (run, sync) in runs.items()}
    times: dict[str, list] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (run, sync) in runs.items():
            times[name].append(_timed(run, sync, calls[name]))
        progress.update(1)
    return times


def _peers(vertices: np.ndarray, faces: np.ndarray, arch: str, wanted: set[str], simd_path: str | None,
           absent: dict[str, str]) -> dict[str, Any]:
    """The peers that can run beside ours here, by name; `absent` gets a reason for each that cannot."""
    peers: dict[str, Any] = {}
    for name in PEERS:
        if name not in wanted:
            continue
        if name in CPU_ONLY and arch != "cpu":
            absent[name] = f"runs on the CPU only; not timed beside ours on {arch} (use --arch cpu)"
            continue
        try:
            if name in ("fcpw-simd", "fcpw"):
                from bench.closest_fcpw import FcpwScene, import_fcpw_simd

                if name == "fcpw-simd":
                    module, why = import_fcpw_simd(simd_path)
                    if module is None:
                        absent[name] = (f"{why}: not timed. Build it outside the repository: bash "
                                        "/work/shared/peers/fcpw/build.sh PYTHON DIR, then --fcpw-simd DIR")
                        continue
                else:
                    import fcpw as module
                peers[name] = FcpwScene(vertices, faces, module, vectorize=True)
            elif name == "Open3D":
                from bench.closest_open3d import Open3DScene

                peers[name] = Open3DScene(vertices, faces)
            elif name == "Warp":
                if arch not in WARP_DEVICE:
                    absent[name] = f"no {arch} backend; not timed"
                    continue
                from bench.closest_warp import WarpMesh

                peers[name] = WarpMesh(vertices, faces, WARP_DEVICE[arch])
            else:
                from bench.closest_igl import IglTree

                peers[name] = IglTree(vertices, faces)
        except (ImportError, OSError) as exc:  # OSError: a system library it needs is missing
            hint = {"Open3D": "pip install -e '.[open3d]'; on Debian it also needs libusb-1.0-0",
                    "Warp": "pip install warp-lang", "fcpw": "pip install fcpw", "libigl": "pip install libigl"}
            absent[name] = f"not importable ({exc}); not timed ({hint.get(name, '')})"
    return peers


def _validate(name: str, found: dict, oracle: np.ndarray | None, scale: float, label: str) -> float | None:
    """The side's worst distance error against the oracle (x diagonal); raises if it is out of tolerance."""
    if (np.asarray(found["face"]) < 0).any():
        raise RuntimeError(f"{label}: {name} left points unanswered; not timing")
    if oracle is None:
        return None
    err = distance_error(found["dist2"], oracle, scale)
    if not err <= ORACLE_TOL:
        raise RuntimeError(f"{label}: {name}'s distances differ from libigl's by {err:.2g} x the diagonal "
                           f"(tolerance {ORACLE_TOL:g}); not timing")
    return err


def _brute_check(ours: Ours, points: np.ndarray, n_faces: int, scale: float, label: str) -> float:
    """Our worst distance error (x diagonal) against the brute-force kernel on the first points.

    Not relative to the squared distances: on cuda two kernels calling the same point-triangle
    function may fuse its multiply-adds differently (2.5e-6 relative near a 1M-triangle surface on
    the first H200 run), and a squared distance near the surface is ill-conditioned.
    """
    k = max(16, min(len(points), BRUTE_TESTS // n_faces))
    found = ours.results(len(points))["dist2"][:k]
    err = distance_error(found, ours.bvh.brute_force(points[:k])["dist2"].astype(np.float64), scale)
    if ours.bvh.counters()["misses"] or not err <= ORACLE_TOL:
        raise RuntimeError(f"{label}: our BVH disagrees with the brute-force kernel ({err:.2g} x the diagonal, "
                           f"tolerance {ORACLE_TOL:g}); not timing")
    return err


def measure_mesh(mesh: str, arch: str, options, progress, result: dict) -> None:
    """Every cell, the build and refit times (and, on the icosphere, the one-query call) of one mesh."""
    vertices, faces = mesh_named(mesh)
    scale = diagonal(vertices)
    ours = Ours(vertices, faces, options.leaf_size)
    peers = _peers(vertices, faces, arch, options.wanted, options.fcpw_simd, result["absent"])
    sides = {"ours": ours} | peers
    result["sides"] = list(dict.fromkeys([*result["sides"], *sides]))
    result["threads"].update({name: side.threads for name, side in sides.items()})
    result["shape"][mesh] = {"faces": len(faces), "depth": ours.bvh.depth, "leaf_size": ours.bvh.leaf_size}
    for case in cases((mesh,)):
        label = f"{mesh} {case.distribution}"
        for n in options.sizes:
            points = queries(vertices, faces, case.distribution, n, seed=n)
            for side in sides.values():
                side.load(points)
                side.query(n)
            oracle = peers[ORACLE].results(n)["dist2"] if ORACLE in peers else None
            cell = {"mesh": mesh, "distribution": case.distribution, "n": n, "faces": len(faces),
                    "brute_err": _brute_check(ours, points, len(faces), scale, f"{label}, {n:,} queries"),
                    "err": {name: _validate(name, side.results(n), oracle, scale, f"{label}, {n:,} queries")
                            for name, side in sides.items()}}
            times = _alternating({name: (lambda side=side: side.query(n), side.synchronize)
                                  for name, side in sides.items()}, options.repeats, progress)
            cell["qps"] = {name: median_spread([n / wall for wall, _ in measured]) for name, measured in times.items()}
            cell["cpu_us"] = {name: statistics.median(cpu for _, cpu in measured) / n * 1e6
                              for name, measured in times.items()}
            cell["busy"] = {name: statistics.median(cpu / wall for wall, cpu in measured)
                            for name, measured in times.items()}
            result["cells"].append(cell)
    builds = {name: (side.build, side.synchronize) for name, side in sides.items()}
    refits = {name: (side.refit, side.synchronize) for name, side in sides.items() if hasattr(side, "refit")}
    for table, runs in (("build_ms", builds), ("refit_ms", refits)):
        times = _alternating(runs, options.repeats, progress, seconds=0.0 if table == "build_ms" else TARGET_S)
        result[table][mesh] = {name: median_spread([wall * 1e3 for wall, _ in measured])
                               for name, measured in times.items()}
    if mesh == "icosphere":
        point = queries(vertices, faces, "uniform", 1, seed=1)
        oracle = one_call(peers[ORACLE], point)["dist2"] if ORACLE in peers else None
        for name, side in sides.items():
            _validate(name, one_call(side, point), oracle, scale, "one query")
        times = _alternating({name: (lambda side=side: one_call(side, point), side.synchronize)
                              for name, side in sides.items()}, options.repeats, progress, seconds=ONE_QUERY_S)
        result["one_query_us"] = {name: median_spread([wall * 1e6 for wall, _ in measured])
                                  for name, measured in times.items()}
    ours.destroy()


def _ms(value: tuple[float, float] | None, spec: str) -> str:
    return "-" if value is None else f"{format(value[0], spec)} ±{value[1] * 50:.0f}%"


def tables(result: dict, arch: str, repeats: int) -> str:
    """The benchmark's markdown: one table per cell, the ratio summary, build/refit and one-query tables."""
    sides = result["sides"]
    peers = [name for name in sides if name != "ours"]
    lines = [f"closest-point queries on {arch}, median of {repeats} (± half the spread, (max - min) / median); "
             f"{machine_load()}",
             "threads: " + ", ".join(f"{name} {result['threads'][name]}" for name in sides)]
    lines += [f"{name}: absent: {why}" for name, why in result["absent"].items()]
    for mesh, shape in result["shape"].items():
        lines.append(f"ours on {mesh}: {shape['faces']:,} triangles, leaf size {shape['leaf_size']}, depth {shape['depth']}")
    by_case: dict[tuple, list] = {}
    for cell in result["cells"]:
        by_case.setdefault((cell["mesh"], cell["distribution"]), []).append(cell)
    ratio_to = "fcpw-simd" if "fcpw-simd" in sides else None
    for (mesh, dist), cells in by_case.items():
        head = (["queries"] + [f"{name} (M q/s)" for name in sides]
                + ([f"ours / {ratio_to}"] if ratio_to else []) + ["ours / best peer"]
                + [f"{name} CPU us/q (busy)" for name in sides])
        lines += ["", f"{mesh} ({cells[0]['faces']:,} triangles), {dist}", "| " + " | ".join(head) + " |",
                  "|" + "---:|" * len(head)]
        for cell in cells:
            qps = cell["qps"]
            best = max((qps[name][0] for name in peers), default=None)
            row = ([f"{cell['n']:,}"] + [_ms((qps[name][0] / 1e6, qps[name][1]), ".3f") for name in sides]
                   + ([f"{qps['ours'][0] / qps[ratio_to][0]:.2f}"] if ratio_to else [])
                   + [f"{qps['ours'][0] / best:.2f}" if best else "-"]
                   + [f"{cell['cpu_us'][name]:.2f} ({cell['busy'][name]:.1f})" for name in sides])
            lines.append("| " + " | ".join(row) + " |")
        worst = {name: max((c["err"][name] or 0.0) for c in cells) for name in sides if name != ORACLE}
        lines.append("max distance error vs libigl (x diagonal): " + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
                     + f"; ours vs brute force (distance, x diagonal): {max(c['brute_err'] for c in cells):.2g}")
    if ratio_to:
        sizes = " / ".join(f"{n:,}" for n in sorted({c['n'] for c in result['cells']}))
        lines += ["", "| mesh, queries | ours / fcpw-simd (" + sizes + ") |",
                  "|---|---|"]
        for (mesh, dist), cells in by_case.items():
            lines.append(f"| {mesh} ({cells[0]['faces']:,}), {dist} | "
                         + " / ".join(f"{c['qps']['ours'][0] / c['qps'][ratio_to][0]:.2f}" for c in cells) + " |")
    for table, title, spec in (("build_ms", "build (ms)", ".1f"), ("refit_ms", "refit (ms)", ".3f")):
        lines += ["", f"| {title} | " + " | ".join(sides) + " |", "|---|" + "---:|" * len(sides)]
        for mesh, times in result[table].items():
            lines.append(f"| {mesh} | " + " | ".join(_ms(times.get(name), spec) for name in sides) + " |")
    if "one_query_us" in result:
        times = result["one_query_us"]
        lines += ["", "| one-point call, numpy to numpy (us) | " + " | ".join(sides) + " |", "|---|" + "---:|" * len(sides),
                  "| icosphere | " + " | ".join(_ms(times.get(name), ".1f") for name in sides) + " |"]
    return "\n".join(lines)


def _names(text: str, known: tuple, flag: str) -> tuple:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise UserError(f"{flag}: unknown {', '.join(unknown) or 'empty list'} (known: {', '.join(map(str, known))})")
    return names


def main(argv: list[str]) -> int:
    parser = bench_parser("closest", __doc__)
    parser.add_argument("--repeats", type=int, default=5,
                        help="repetitions (the median is reported; default %(default)s)")
    parser.add_argument("--meshes", default=",".join(MESHES),
                        help=f"comma-separated, of {', '.join(MESHES)} (default: all)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="queries per batch, comma-separated (default %(default)s)")
    parser.add_argument("--fcpw-simd", default=None, metavar="DIR",
                        help="folder holding the _fcpwsimd module (default: $SHANNON_FCPW_SIMD)")
    for name in PEERS:
        parser.add_argument(f"--no-{name.lower()}", action="store_true", help=f"do not time {name}")
    parser.add_argument("--leaf-size", type=int, default=None,
                        help="most triangles per BVH leaf (default: engine.triangle_bvh.DEFAULT_LEAF_SIZE)")
    options = parser.parse_args(argv)
    if options.repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {options.repeats})")
    meshes = _names(options.meshes, MESHES, "--meshes")
    try:
        options.sizes = tuple(int(n) for n in options.sizes.split(","))
    except ValueError:
        raise UserError(f"--sizes: comma-separated positive integers expected, got {options.sizes!r}") from None
    if min(options.sizes) < 1:
        raise UserError(f"--sizes: every size must be positive, got {options.sizes}")
    options.wanted = {name for name in PEERS if not getattr(options, f"no_{name.lower().replace('-', '_')}")}

    from engine import backend
    from engine.progress import bar

    arch = backend.init(options.arch).name
    result: dict[str, Any] = {"sides": [], "threads": {}, "absent": {}, "shape": {}, "cells": [],
                              "build_ms": {}, "refit_ms": {}}
    steps = sum(len(cases((mesh,))) * len(options.sizes) + 2 + (mesh == "icosphere") for mesh in meshes)
    with bar(total=steps * options.repeats, desc="closest-point bench") as progress:
        for mesh in meshes:
            measure_mesh(mesh, arch, options, progress, result)
    emit(tables(result, arch, options.repeats), "closest", options.out)
    return 0
