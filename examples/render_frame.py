"""Render a frame: the robot arm restoring its sign, ray-marched by one Taichi kernel on any backend.

`scene_at(t)` solves the arm's kinematics on the host for a time t of the timeline; the
`Renderer` packs scene and camera into one small parameter array and launches the kernel,
which marches every pixel (SDFs, soft shadows, ambient occlusion). Depth, normals and
march steps come back as extra images.

    python examples/render_frame.py --t 0.3             # then a window shows the frame
    python examples/render_frame.py --width 512 --height 256 --arch vulkan --headless
"""
from pathlib import Path

import numpy as np

from app.flags import example_parser
from app.scenes.robot_arm import scene_at
from engine import backend, image_io
from engine.render import Camera, Renderer

if __name__ == "__main__":
    parser = example_parser(__doc__)                    # --arch, --headless
    parser.add_argument("--t", type=float, default=0.5, help="time on the timeline, 0..1 (default 0.5)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--out", default="out/examples", help="folder for frame.png")
    args = parser.parse_args()
    print(f"backend: {backend.init(args.arch).name}")

    renderer = Renderer(args.width, args.height)
    camera = Camera(azimuth=24.0, elevation=20.0, distance=4.7)    # an orbit around the sign
    rgb = renderer.render(scene_at(args.t), camera)                # (H, W, 3) float32, linear
    depth, normals, steps = renderer.depth(), renderer.normals(), renderer.steps()
    renderer.render(scene_at(args.t), camera)                      # again, compiled: the time of a frame
    print(f"{args.width}x{args.height} at t={args.t:g}: {renderer.last_ms:.0f} ms, mean colour "
          f"{np.round(rgb.mean(axis=(0, 1)), 3)}, surface hit by {np.mean(np.abs(normals).sum(-1) > 0):.0%} of the "
          f"pixels, {steps.mean():.0f} march steps per pixel")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    image_io.write_linear_png(out / "frame.png", rgb)               # sRGB-encoded PNG
    print(f"wrote {out / 'frame.png'}")
    if not args.headless:
        from app.ui.viewer import show_image

        show_image(f"render_frame: t = {args.t:g}", image_io.srgb8(rgb))
    if not (np.isfinite(rgb).all() and rgb.std() > 0.05 and np.isfinite(depth).all()):
        raise SystemExit("render_frame: the frame is blank or not finite")
