"""`python -m app bench raymarch`: warm ms per frame of the robot-arm scene, ours vs a Warp port.

Ours (engine.render.Renderer on the chosen backend) at 2048x1024, 1024x512 and 512x256, in packets of the
backend's lane count (engine.kernels.lanes), and on the cpu also one ray per thread at 2048x1024 (after checking
that it renders the same image bit for bit);
Warp (bench/warp_raymarch.py, the same SDFs and shading, on Warp's CPU device, or CUDA
when ours runs on CUDA) at 2048x1024, after checking that it renders the same frame
as ours within the parity tolerance (>= 99.95 % of pixels within 1e-4, none off by
more than 5e-2). Each figure is the median of --repeats warm frames at t = 0.5.
Warp is optional: without warp-lang installed only our times are printed. On the cpu the same frames also run on
lavapipe (Vulkan on the same cores, one ray per thread) in a worker process, checked for the same image first;
its times are the renderer's launch to sync (`raymarch_frame`'s ms), ours include reading the image back
(conservative against ours).
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from bench import bench_parser, emit, machine_load
from engine.errors import UserError

SIZES = ((2048, 1024), (1024, 512), (512, 256))
T = 0.5


def _median_ms(render, repeats: int, progress) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        render()
        times.append((time.perf_counter() - started) * 1e3)
        progress.update(1)
    return statistics.median(times)


def _lavapipe_rows(ours_full, repeats: int, progress) -> list[tuple]:
    """Our kernel on Vulkan (lavapipe: the same cores) at every size, in a worker process; the first frame at the
    largest size checked against ours (the parity claim's tolerance) before anything is timed."""
    from app.claims.raymarch_parity import pixel_parity
    from app.claims.thresholds import PIXEL_ATOL, PIXEL_MAX_ERR, PIXEL_MIN_SHARE
    from engine.worker import BackendWorker

    rows = []
    with BackendWorker("vulkan") as worker:
        for width, height in SIZES:
            first = worker.call("raymarch_frame", t=T, width=width, height=height)  # compiles (first size only)
            progress.update(1)
            note = ""
            if (width, height) == SIZES[0]:
                share, max_err, _ = pixel_parity(ours_full, first["rgb"])
                note = f"same image: {share * 100:.4f}% within {PIXEL_ATOL:g}, max err {max_err:.2g}"
                if share < PIXEL_MIN_SHARE or max_err > PIXEL_MAX_ERR:
                    raise UserError(f"lavapipe does not render the same frame ({note}); not timing it")
            times = []
            for _ in range(repeats):
                times.append(float(worker.call("raymarch_frame", t=T, width=width, height=height)["ms"]))
                progress.update(1)
            rows.append(("ours (vulkan: lavapipe, 1 lane)", f"{width}x{height}", statistics.median(times),
                         "launch to sync" + (f"; {note}" if note else "")))
    return rows


def main(argv: list[str]) -> int:
    parser = bench_parser("raymarch", __doc__)
    parser.add_argument("--repeats", type=int, default=3,
                        help="warm frames per size (the median is reported; default %(default)s)")
    parser.add_argument("--no-warp", action="store_true", help="do not time the Warp port")
    parser.add_argument("--no-lavapipe", action="store_true", help="on the cpu, do not time vulkan beside it")
    options = parser.parse_args(argv)
    if options.repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {options.repeats})")

    from app.claims.raymarch_parity import pixel_parity
    from app.claims.thresholds import PIXEL_ATOL, PIXEL_MAX_ERR, PIXEL_MIN_SHARE
    from app.scenes.robot_arm import scene_at
    from engine import backend
    from engine.progress import bar
    from engine.render import Camera, Renderer, pack

    arch = backend.init(options.arch).name
    scene, camera = scene_at(T), Camera()
    warp = None
    if not options.no_warp:
        try:
            from bench.warp_raymarch import WarpRenderer
            warp = WarpRenderer
        except ImportError as exc:
            print(f"warp not importable ({exc}); timing ours only")
    rows = []
    extra = (1 if warp else 0) + (1 if arch == "cpu" else 0) + (len(SIZES) if arch == "cpu" and not options.no_lavapipe else 0)
    with bar(total=(len(SIZES) + extra) * (options.repeats + 1), desc="raymarch bench") as progress:
        ours_full = None
        for width, height in SIZES:
            renderer = Renderer(width, height)
            image = renderer.render(scene, camera)  # compile (first size only) and warm up
            progress.update(1)
            ours_full = image if ours_full is None else ours_full
            rows.append((f"ours ({arch}, {renderer.lanes} lane{'s' if renderer.lanes > 1 else ''})", f"{width}x{height}",
                         _median_ms(lambda: renderer.render(scene, camera), options.repeats, progress), ""))
        if arch == "cpu":
            width, height = SIZES[0]
            scalar = Renderer(width, height, lanes=1)
            if not np.array_equal(scalar.render(scene, camera), ours_full):
                raise UserError("one ray per thread renders another image than the packets; not timing it")
            progress.update(1)
            ms = _median_ms(lambda: scalar.render(scene, camera), options.repeats, progress)
            rows.append(("ours (cpu, 1 lane)", f"{width}x{height}", ms,
                         f"the same image bit for bit; packets {ms / rows[0][2]:.2f}x faster"))
        if arch == "cpu" and not options.no_lavapipe:
            rows += _lavapipe_rows(ours_full, options.repeats, progress)
        if warp:
            width, height = SIZES[0]
            device = "cuda:0" if arch == "cuda" else "cpu"
            peer = warp(width, height, device)
            prm = pack(scene, camera, width, height)
            peer.render(prm)  # compile, warm up, and the frame we validate
            progress.update(1)
            share, max_err, _ = pixel_parity(ours_full, peer.image())
            same = share >= PIXEL_MIN_SHARE and max_err <= PIXEL_MAX_ERR
            note = f"same image: {share * 100:.4f}% within {PIXEL_ATOL:g}, max err {max_err:.2g}"
            if not same:
                raise UserError(f"the Warp port does not render the same frame ({note}); not timing it")
            rows.append((f"warp ({device})", f"{width}x{height}",
                         _median_ms(lambda: peer.render(prm), options.repeats, progress), note))
    lines = [f"ray march, robot-arm scene at t={T}, warm, median of {options.repeats} ({machine_load()})",
             "", "| renderer | size | ms/frame | notes |", "|---|---|---:|---|"]
    lines += [f"| {name} | {size} | {ms:.1f} | {note} |" for name, size, ms, note in rows]
    lavapipe = [row for row in rows if row[0].startswith("ours (vulkan") and row[1] == rows[0][1]]
    if lavapipe:
        lines += ["", f"ours ({arch}) vs lavapipe on the same cores at {rows[0][1]}: {lavapipe[0][2] / rows[0][2]:.2f}x"]
    if warp:
        ours_ms = rows[0][2]
        lines += ["", f"ours vs warp at {SIZES[0][0]}x{SIZES[0][1]}: {rows[-1][2] / ours_ms:.2f}x "
                      f"({'faster' if ours_ms < rows[-1][2] else 'slower'})"]
    emit("\n".join(lines), "raymarch", options.out)
    return 0
