"""`python -m app render`: render the robot-arm scene to files.

One frame (default t = 0.5, 2048x1024): `frame.png` (sRGB), `frame.npy` (linear float32
RGB) and with `--aov all` also `depth.png`, `normals.png`, `steps.png` (march-step
heatmap). `--frames N` renders N frames over t in [0, 1] into `frames/frame_0000.png`...
and `animation.gif`, with a progress bar. The backend that actually ran is printed.
Bad flags (sizes out of 1..16384 or beyond memory, t outside [0, 1]) are one-line errors.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from app.cli import add_arch_argument
from app.scenes.robot_arm import scene_at
from engine import backend, image_io
from engine.errors import UserError
from engine.progress import bar
from engine.render import MAX_DEPTH, MAX_STEPS, Camera, Renderer, check_size

MAX_FRAMES = 10000


def _parser() -> argparse.ArgumentParser:
    defaults = Camera()
    p = argparse.ArgumentParser(prog="python -m app render", description=__doc__.splitlines()[0])
    p.add_argument("--t", type=float, default=0.5, help="time on the timeline, 0..1 (default 0.5)")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--height", type=int, default=1024)
    p.add_argument("--azimuth", type=float, default=defaults.azimuth, help="degrees; 0 faces the sign")
    p.add_argument("--elevation", type=float, default=defaults.elevation, help="degrees above the horizon")
    p.add_argument("--distance", type=float, default=defaults.distance, help="metres from the target")
    p.add_argument("--frames", type=int, default=0, help="render an N-frame animation over t in [0, 1]")
    p.add_argument("--fps", type=float, default=24.0, help="GIF frame rate (default 24)")
    p.add_argument("--aov", choices=("none", "all"), default="none", help="also write depth, normals, steps")
    p.add_argument("--out", default="out/render", help="output folder (default out/render)")
    add_arch_argument(p)
    return p


def _validate(args: argparse.Namespace) -> Camera:
    check_size(args.width, args.height)
    if not 0.0 <= args.t <= 1.0:
        raise UserError(f"--t {args.t} is outside the timeline: choose 0..1")
    if args.frames < 0 or args.frames > MAX_FRAMES:
        raise UserError(f"--frames {args.frames} is out of range: choose 0..{MAX_FRAMES}")
    if args.fps <= 0:
        raise UserError(f"--fps {args.fps} must be positive")
    return check_camera(args.azimuth, args.elevation, args.distance)


def check_camera(azimuth: float, elevation: float, distance: float) -> Camera:
    """The orbit camera of the --azimuth/--elevation/--distance flags; UserError naming a flag out of range."""
    if not 0.5 <= distance <= 100.0:
        raise UserError(f"--distance {distance} is out of range: choose 0.5..100 metres")
    if not -89.0 <= elevation <= 89.0:
        raise UserError(f"--elevation {elevation} is out of range: choose -89..89 degrees")
    return Camera(azimuth=azimuth, elevation=elevation, distance=distance)


def _write_aovs(renderer: Renderer, out: Path) -> None:
    image_io.write_png(out / "depth.png", image_io.depth_image(renderer.depth(), MAX_DEPTH))
    image_io.write_png(out / "normals.png", image_io.normal_image(renderer.normals()))
    image_io.write_png(out / "steps.png", image_io.heatmap(renderer.steps(), 0, MAX_STEPS))


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    camera = _validate(args)
    running = backend.init(args.arch)
    out = Path(args.out)
    renderer = Renderer(args.width, args.height)
    if args.frames == 0:
        started = time.perf_counter()
        rgb = renderer.render(scene_at(args.t), camera)
        image_io.write_linear_png(out / "frame.png", rgb)
        image_io.write_npy(out / "frame.npy", rgb)
        if args.aov == "all":
            _write_aovs(renderer, out)
        print(f"rendered t={args.t:g} at {args.width}x{args.height} on {running.name} in "
              f"{time.perf_counter() - started:.2f} s (kernel {renderer.last_ms:.0f} ms) -> {out}/frame.png")
        return 0
    frames = []
    for i in bar(range(args.frames), desc=f"rendering {args.frames} frames on {running.name}"):
        t = i / max(args.frames - 1, 1)
        pixels = image_io.srgb8(renderer.render(scene_at(t), camera))
        image_io.write_png(out / "frames" / f"frame_{i:04d}.png", pixels)
        frames.append(pixels)
    image_io.write_gif(out / "animation.gif", frames, fps=args.fps)
    print(f"rendered {args.frames} frames at {args.width}x{args.height} on {running.name} "
          f"-> {out}/frames/ and {out}/animation.gif")
    return 0
