"""`python -m app bench gui_fps [--arch A] [--frames N] [--size WxH] [--play]`: the desktop app's frame rate while a fit runs.

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
    args = parser.parse_args(argv)
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        print("gui_fps: skipped: no display (run under xvfb-run)")
        return 0
    arch, parity_arch = resolve_archs(args.arch, args.parity_arch)
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
