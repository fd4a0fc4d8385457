"""Render the robot-arm scene to image files (one frame, or an animation).

One frame (default t = 0.5, 2048x1024): `frame.png` (sRGB); with `--aov all` also
`depth.png` (inverse depth: white = nearest hit, dark grey = farthest, black = no hit),
`normals.png` (0.5 + 0.5 n, world space) and `steps.png` (march-step heat map). Each
AOV PNG has a legend drawn under the picture (`engine.image_io.with_legend`: a colour bar with
its units and ticks, swatches for no hit and the axes), names the range of values it encodes in a
PNG text chunk, and `render.json` records them with the settings and the backend that ran. Float outputs are opt-in:
`--float npy|exr` adds `frame.npy|exr` (linear float32 RGB) and, with `--aov all`,
`depth` (metres along the ray; escaped rays hold the march's far limit) and `normals`.

`--frames N` renders N frames over t in [0, 1] into `frames/frame_0000.png`... and
`animation.gif` / `animation.mp4` (`--video`), with a progress bar.

`--edges` chooses who draws: `hard` (the default) the forward ray marcher
(`engine.render.Renderer`, the desktop app's image: point-sampled silhouettes), `soft` the
differentiable render (`engine.diff_render`: silhouettes antialiased by its one-footprint
soft coverage, the edge math of `engine.kernels.raymarch_grad`), at up to 512x256 and without
AOVs. A soft PNG is the image `python -m app invert` compares, so `invert --target-image`
recovers the pose from it; its PNG says so in a text chunk (`engine.image_io.png_edges_text`),
which `invert --compare auto` reads (`engine.image_io.png_edges`). Hard-edged PNGs recover to
about a degree only (docs/RESULTS.md).

Every flag is checked before the backend starts (sizes within 1..16384 and memory,
finite numbers in range, a writable output folder that no other run is using).
SIGINT/SIGTERM: the frame in progress finishes, the frames done and their animation are
written, `render.json` says `"interrupted": true`, and the exit code is 130.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from app.flags import add_arch_argument
from engine import atomic, image_io, output_dir
from engine.errors import Interrupted, UserError
from engine.interrupt import StopFlag, graceful_stop

MAX_FRAMES = 10000
FPS_RANGE = (0.1, 50.0)  # a GIF stores delays in hundredths of a second; browsers slow delays under 2/100 s
VIDEO_FORMATS = ("gif", "mp4")
ANIMATION_BUDGET = 4 * 2**30  # bytes of frames held for the GIF/MP4 encoders
OUTPUTS = ("frame.png", "frame.npy", "frame.exr", "depth.png", "depth.npy", "depth.exr", "normals.png", "normals.npy",
           "normals.exr", "steps.png", "render.json", "animation.gif", "animation.mp4", "frames/frame_*.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `render` flags (see the module docstring)."""
    from engine.render import Camera

    defaults = Camera()
    scene = parser.add_argument_group("scene and camera")
    scene.add_argument("--t", type=float, default=0.5, help="time on the timeline, 0..1 (default 0.5)")
    scene.add_argument("--azimuth", type=float, default=defaults.azimuth,
                       help=f"camera degrees around the target; 0 faces the sign (default {defaults.azimuth:g})")
    scene.add_argument("--elevation", type=float, default=defaults.elevation,
                       help=f"camera degrees above the horizon, -89..89 (default {defaults.elevation:g})")
    scene.add_argument("--distance", type=float, default=defaults.distance,
                       help=f"camera metres from the target, 0.5..100 (default {defaults.distance:g})")
    image = parser.add_argument_group("image")
    image.add_argument("--width", type=int, default=2048, help="pixels, 1..16384 (default 2048)")
    image.add_argument("--height", type=int, default=1024, help="pixels, 1..16384 (default 1024)")
    image.add_argument("--edges", choices=image_io.EDGE_KINDS, default="hard",
                       help="hard: the forward ray marcher, point-sampled silhouettes (the desktop app's image; "
                            "default); soft: the differentiable render, silhouettes antialiased with its soft "
                            "coverage, up to 512x256, no --aov: the image `invert` compares, so `invert "
                            "--target-image` recovers the pose from this PNG")
    image.add_argument("--aov", choices=("none", "all"), default="none",
                       help="also write depth, normals and march steps (default none)")
    image.add_argument("--float", choices=("none", *image_io.FLOAT_FORMATS), default="none", dest="float_format",
                       help="also write linear float32 data: the frame (and with --aov all, depth and normals) as "
                            ".npy or .exr (default none)")
    animation = parser.add_argument_group("animation")
    animation.add_argument("--frames", type=int, default=0, metavar="N",
                           help=f"render an N-frame animation over t in [0, 1] (1..{MAX_FRAMES}; default 0: one frame)")
    animation.add_argument("--fps", type=float, default=24.0,
                           help=f"animation frame rate, {FPS_RANGE[0]:g}..{FPS_RANGE[1]:g} (default 24; the GIF "
                                "rounds its delay to hundredths of a second)")
    animation.add_argument("--video", default="gif,mp4", metavar="FORMATS",
                           help="animation files: gif, mp4, both (gif,mp4, the default) or none")
    run_group = parser.add_argument_group("run")
    add_arch_argument(run_group)
    run_group.add_argument("--out", default="out/render", metavar="DIR", help="output folder (default out/render)")


def _number(flag: str, value: float, lo: float | None = None, hi: float | None = None, unit: str = "") -> float:
    if not math.isfinite(value):
        raise UserError(f"{flag} {value} is not a finite number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise UserError(f"{flag} {value:g} is out of range: choose {lo:g}..{hi:g}{unit}")
    return value


def _videos(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))
    if names == ("none",):
        return ()
    bad = [name for name in names if name not in VIDEO_FORMATS]
    if bad or not names:
        raise UserError(f"--video '{text}': choose gif, mp4, gif,mp4 or none")
    return names


def _validate(args: argparse.Namespace) -> tuple:
    """Everything checkable before the backend starts; returns (camera, videos, bytes needed on disk)."""
    from engine import backend
    from engine.render import Camera, check_size

    backend.check_requested(args.arch)
    check_size(args.width, args.height)
    if args.edges == "soft":
        from app.scenes.inverse_render import MAX_HEIGHT, MAX_WIDTH

        if args.width > MAX_WIDTH or args.height > MAX_HEIGHT:
            raise UserError(f"--edges soft renders at up to {MAX_WIDTH}x{MAX_HEIGHT} (the differentiable renderer's "
                            f"size), got {args.width}x{args.height}: a smaller size, or --edges hard")
        if args.aov != "none":
            raise UserError("--aov all draws the forward ray marcher's depth, normals and steps: leave it out with "
                            "--edges soft")
    _number("--t", args.t, 0.0, 1.0, " (the timeline)")
    _number("--azimuth", args.azimuth)
    _number("--elevation", args.elevation, -89.0, 89.0, " degrees")
    _number("--distance", args.distance, 0.5, 100.0, " metres")
    _number("--fps", args.fps, *FPS_RANGE, " frames per second")
    if not 0 <= args.frames <= MAX_FRAMES:
        raise UserError(f"--frames {args.frames} is out of range: choose 0..{MAX_FRAMES}")
    single = [flag for flag, on in (("--aov all", args.aov == "all"), ("--float", args.float_format != "none")) if on]
    if args.frames and single:
        verb = "applies" if len(single) == 1 else "apply"
        raise UserError(f"{' and '.join(single)} {verb} to a single frame: leave out --frames, or {' and '.join(single)}")
    videos = _videos(args.video) if args.frames else ()
    frame_bytes = args.width * args.height * 3
    if videos and args.frames * frame_bytes > ANIMATION_BUDGET:
        raise UserError(f"--frames {args.frames} at {args.width}x{args.height} holds "
                        f"{args.frames * frame_bytes / 2**30:.1f} GiB of frames for the animation "
                        f"(limit {ANIMATION_BUDGET / 2**30:.0f} GiB): fewer frames, a smaller size, or --video none")
    floats = 0 if args.float_format == "none" else frame_bytes * 4 * (7 / 3 if args.aov == "all" else 1)
    need = (max(args.frames, 1) * frame_bytes + floats) // 2 + output_dir.MIN_FREE_BYTES  # PNGs compress ~2x or more
    camera = Camera(azimuth=args.azimuth, elevation=args.elevation, distance=args.distance)
    return camera, videos, int(need)


def _aov_labels(renderer) -> dict[str, str]:
    """What each AOV PNG encodes, in words with its value range (PNG text chunk and render.json)."""
    from engine.render import MAX_DEPTH, MAX_STEPS

    span = image_io.depth_range(renderer.depth(), MAX_DEPTH)
    depth = ("no ray hit anything" if span is None else
             f"inverse depth: white = nearest hit {span[0]:.4g} m, dark grey = farthest hit {span[1]:.4g} m "
             f"(grey level linear in 1/depth), black = no hit")
    return {"depth.png": depth,
            "normals.png": "world-space unit normal n as RGB = 0.5 + 0.5 n, each channel -1..1 (y up; +z "
                           "towards the camera at azimuth 0); black = no hit",
            "steps.png": f"ray-march steps per pixel, 0 (dark blue) .. {MAX_STEPS} (yellow), viridis-like ramp"}


def _write_frame(out: Path, rgb, args: argparse.Namespace) -> list[str]:
    """One frame's image files (the PNG, and the float frame with --float); returns their names."""
    written = ["frame.png"]
    image_io.write_png(out / "frame.png", image_io.srgb8(rgb), text=image_io.png_edges_text(args.edges))
    if args.float_format != "none":
        image_io.write_float(out / f"frame.{args.float_format}", rgb)
        written.append(f"frame.{args.float_format}")
    return written


def _write_aovs(renderer, out: Path, args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """`--aov all`: the forward ray marcher's depth, normals and steps (and their floats); names and labels."""
    from engine.render import MAX_DEPTH, MAX_STEPS

    labels = _aov_labels(renderer)
    depth = renderer.depth()
    images = {"depth.png": (image_io.depth_image(depth, MAX_DEPTH), image_io.depth_legend(depth, MAX_DEPTH)),
              "normals.png": (image_io.normal_image(renderer.normals()), image_io.normals_legend()),
              "steps.png": (image_io.heatmap(renderer.steps(), 0, MAX_STEPS), image_io.steps_legend(MAX_STEPS))}
    written = []
    for name, (pixels, legend) in images.items():
        image_io.write_png(out / name, image_io.with_legend(pixels, legend),
                           text={"Description": labels[name], "Software": "shannon-autograd"})
        written.append(name)
    if args.float_format != "none":
        for name, data in (("depth", renderer.depth()), ("normals", renderer.normals())):
            image_io.write_float(out / f"{name}.{args.float_format}", data)
            written.append(f"{name}.{args.float_format}")
    return written, labels


def run(args: argparse.Namespace) -> int:
    """`python -m app render ...` (see the module docstring)."""
    camera, videos, need = _validate(args)
    with output_dir.claim(args.out, "render", OUTPUTS, need_bytes=need) as folder, graceful_stop() as stop:
        return _render(args, camera, videos, folder.path, stop)


def _soft_drawer(args: argparse.Namespace, camera):
    """t -> the differentiable render's image of the timeline at t (linear RGB, `invert`'s `render_target`)."""
    from app.scenes.inverse_render import render_target
    from app.scenes.robot_arm import theta_at

    return lambda t: render_target(theta_at(t), args.width, args.height, camera, "diff")


def _render(args: argparse.Namespace, camera, videos: tuple[str, ...], out: Path, stop: StopFlag) -> int:
    from app.scenes.robot_arm import scene_at
    from engine import backend
    from engine.progress import bar
    from engine.render import Renderer

    running = backend.init(args.arch)
    renderer = Renderer(args.width, args.height) if args.edges == "hard" else None
    draw = (lambda t: renderer.render(scene_at(t), camera)) if renderer else _soft_drawer(args, camera)
    started = time.perf_counter()
    record = {"t": args.t, "width": args.width, "height": args.height, "camera": {
        "azimuth": camera.azimuth, "elevation": camera.elevation, "distance": camera.distance},
        "edges": args.edges, "arch": running.name, "backend": running.as_record(), "frames": args.frames}
    if args.frames == 0:
        rgb = draw(args.t)
        kernel = f" (kernel {renderer.last_ms:.0f} ms)" if renderer else ""
        written, labels = _write_frame(out, rgb, args), {}
        if args.aov == "all":  # hard edges only (_validate refuses --aov with --edges soft)
            aovs, labels = _write_aovs(renderer, out, args)
            written += aovs
        record.update(aovs=labels)
        summary = (f"rendered t={args.t:g} at {args.width}x{args.height} ({args.edges} edges) on {running.name} in "
                   f"{time.perf_counter() - started:.2f} s{kernel}")
    else:
        frames, written, done = [], [], 0
        for i in bar(range(args.frames), desc=f"rendering {args.frames} frames on {running.name}"):
            if stop:
                break
            pixels = image_io.srgb8(draw(i / max(args.frames - 1, 1)))
            image_io.write_png(out / "frames" / f"frame_{i:04d}.png", pixels,
                               text=image_io.png_edges_text(args.edges))
            written.append(f"frames/frame_{i:04d}.png")
            done += 1
            if videos:
                frames.append(pixels)
        writers = {"gif": image_io.write_gif, "mp4": image_io.write_mp4}
        animations = [f"animation.{fmt}" for fmt in videos] if frames else []
        for name in animations:
            writers[name.split(".")[1]](out / name, frames, fps=args.fps)
        written += animations
        record.update(frames_done=done, fps=args.fps,
                      gif_delay_ms=image_io.gif_delay_ms(args.fps) if "gif" in videos else None)
        summary = f"rendered {done} frames at {args.width}x{args.height} on {running.name}"
    record.update(wall_s=round(time.perf_counter() - started, 3), interrupted=bool(stop),
                  signal=stop.signal_name or None, files=written)
    atomic.write_json(out / "render.json", record)
    if stop:
        raise Interrupted(stop.signal_name, f"{len(written)} file(s) written to {out}/, render.json marked "
                                            "\"interrupted\": true")
    print(f"{summary}; wrote {out}/: {files_line(written + ['render.json'])}")
    return 0


def files_line(written: list[str]) -> str:
    """The files a render wrote, for its last line: every name, the frames as one folder entry with their count."""
    frames = [name for name in written if name.startswith("frames/")]
    rest = [name for name in written if not name.startswith("frames/")]
    return ", ".join(([f"frames/ ({len(frames)} PNG{'s' if len(frames) != 1 else ''})"] if frames else []) + rest)
