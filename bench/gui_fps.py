"""`python -m app bench gui_fps [--arch A] [--frames N] [--size WxH] [--play]`: the desktop app's frame rate while a fit runs.

`--invert [--t T] [--seed S]`: the Inverse render panel's recovery instead (issue 27: the panel's speed), of its
default frame and seed or those given. Its Start is pressed
once every panel shows live content and the window closes when the recovery ends; then the same recovery
(app.ui.services.invert_reset / invert_run, the panel's own calls) runs again in this process without the
window, to compare: its wall time and its result, which must be the panel's (exit 1 otherwise).

The issue-6 goal: at least 30 fps at 1280x800 under Xvfb with Mesa's llvmpipe on 2 cores
while a shape fit runs. The app opens with its default layout; once every panel shows live
content the fit is started (with `--play`, the timeline too, so preview frames render
between the fit's batches) and the next N frames are timed. The app caps itself at 60 fps
on software GL (`app.ui.app.SOFTWARE_GL_FPS_MAX`), so that is the most this can report
there. Prints one table row (with the window's MSAA samples: 0 expected) and the load
average, since other processes on the machine change the figure. Needs a display: run under
`xvfb-run -a -s "-screen 0 1280x800x24"`; without one it says so and skips.
"""
from __future__ import annotations

import math
import os

from bench import bench_parser, emit, machine_load


def main(argv: list[str]) -> int:
    from app.ui.app import AppOptions, parse_size, run_app
    from engine.backend import resolve_archs

    parser = bench_parser("gui_fps", __doc__)
    parser.add_argument("--parity-arch", default=None, metavar="cuda|vulkan|cpu",
                        help="the Parity panel's backend (default: vulkan beside cpu, else cpu)")
    parser.add_argument("--frames", type=int, default=120,
                        help="frames timed once the fit runs (default 120: the fit, 400 iterations, must outlast them)")
    parser.add_argument("--size", default="1280x800", metavar="WxH", help="window size (default %(default)s)")
    parser.add_argument("--play", action="store_true",
                        help="play the timeline too: preview frames render between the fit's batches")
    parser.add_argument("--invert", action="store_true",
                        help="time the Inverse render panel's recovery (to its end) instead of the fit")
    parser.add_argument("--t", type=float, default=None, help="with --invert: the target frame (default: the panel's)")
    parser.add_argument("--seed", type=int, default=None, help="with --invert: the start's seed (default: the panel's)")
    args = parser.parse_args(argv)
    if (args.t is not None or args.seed is not None) and not args.invert:
        parser.error("--t and --seed go with --invert")
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        print("gui_fps: skipped: no display (run under xvfb-run)")
        return 0
    arch, parity_arch = resolve_archs(args.arch, args.parity_arch)
    if args.invert:
        return _invert(args, arch, parity_arch)
    run = run_app(AppOptions(arch=arch, parity_arch=parity_arch, frames=args.frames, size=parse_size(args.size),
                             start_fit=True, play=args.play))
    state = run.state
    fit_rate = run.warm_fit_iterations / run.warm_seconds if run.warm_seconds else 0.0
    cap = f"{state.fps_cap:g}" if state.fps_cap else "none"
    still_fitting = "" if state.fit.running else " (the fit ended before the frames did: use fewer --frames)"
    emit("\n".join([
        "| window | GL (window samples) | timeline | UI fps while fitting (frame cap) | frames timed "
        "| fit it/s meanwhile | fit iterations | ray-march frames meanwhile |",
        "|---|---|---|---|---|---|---|",
        f"| {args.size} | {state.gl_renderer} ({state.gl_samples}) | {'playing' if args.play else 'still'} "
        f"| {run.fps:.1f} ({cap}) | {run.warm_frames} in {run.warm_seconds:.1f} s "
        f"| {fit_rate:.1f} | {state.fit.iteration}{still_fitting} | {run.warm_renders} |",
        machine_load()]), "gui_fps", args.out)
    return 0


def _invert(args, arch: str, parity_arch: str) -> int:
    """The panel's recovery in the window, then the same one without it; one table row."""
    import time

    import numpy as np

    from app.ui import services
    from app.ui.app import AppOptions, parse_size, run_app
    from app.ui.controller import INVERT_VIEW
    from app.ui.state import InvertView
    from engine import backend

    default = InvertView()
    case = (default.t if args.t is None else args.t, default.seed if args.seed is None else args.seed)
    run = run_app(AppOptions(arch=arch, parity_arch=parity_arch, size=parse_size(args.size), start_invert=True,
                             invert_case=case))
    view = run.state.invert
    if not view.done:
        print(f"gui_fps: the panel's recovery did not end (status {view.status or 'none'}: {view.error})")
        return 1
    backend.init(arch)
    started = time.perf_counter()
    services.invert_reset(view.t, *INVERT_VIEW, view.perturbation, view.seed)
    out = services.invert_run(10 ** 9, math.inf)
    bare_s = time.perf_counter() - started
    same = str(out["status"]) == view.status and np.array_equal(np.asarray(out["current"], np.float64),
                                                                np.asarray(view.current, np.float64))
    fps = run.invert_frames / run.invert_seconds if run.invert_seconds else 0.0
    emit("\n".join([
        "| window | GL | recovery (t, seed, view) | status | steps | in the panel: s, steps/s, UI fps "
        "| without the window: s | same result |",
        "|---|---|---|---|---|---|---|---|",
        f"| {args.size} | {run.state.gl_renderer} | t = {view.t:g}, seed {view.seed}, {INVERT_VIEW[0]}x{INVERT_VIEW[1]} "
        f"| {view.status} | {view.iteration} | {run.invert_seconds:.1f}, {view.iteration / run.invert_seconds:.2f}, "
        f"{fps:.1f} | {bare_s:.1f} | {'yes' if same else 'NO'} |",
        machine_load()]), "gui_fps", args.out)
    return 0 if same else 1
