"""Inverse rendering: recover the robot arm's joint angles from a picture, by gradient descent through the ray march.

The target is the differentiable renderer's image of the timeline's frame at t; the start
moves every joint by 15-20 degrees (seeded). Each iteration renders, takes the L2 image
loss over a small image pyramid and its gradient with respect to the scene parameters
theta (the march untaped, the hit points corrected by a taped Newton step, silhouettes by
a soft coverage, the kinematics on the device), and steps Adam on the device. The joints
must end within 1 degree of the truth (the project's claim `pose_recovery` asks 0.5 degrees
at 256x128 over 400 iterations; `python -m app invert` is the full command).

    python examples/inverse_render.py                   # then a window shows current | target | |difference|
    python examples/inverse_render.py --iters 300 --arch vulkan --headless
"""
from pathlib import Path

import numpy as np

from app.flags import example_parser
from app.scenes.invert import InverseRender, InvertSettings, render_target, side_by_side
from app.scenes.robot_arm import theta_at
from engine import backend, image_io, scene_theta

if __name__ == "__main__":
    parser = example_parser(__doc__)                    # --arch, --headless
    parser.add_argument("--t", type=float, default=0.1, help="time on the timeline of the target (default 0.1)")
    parser.add_argument("--iters", type=int, default=150, help="iterations (default 150)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--out", default="out/examples", help="folder for invert.png")
    args = parser.parse_args()
    print(f"backend: {backend.init(args.arch).name}")

    truth = theta_at(args.t)                                           # 21 scene parameters (engine.scene_theta.NAMES)
    target = render_target(truth, args.width, args.height)             # (H, W, 3) float32, linear
    start = scene_theta.perturb(truth, {"joints": 20.0}, seed=2)       # every joint 15..20 degrees off
    settings = InvertSettings(iterations=args.iters, groups=("joints",))  # only the joints move
    inv = InverseRender(target, start, truth, args.width, args.height, settings=settings)
    for _ in range(args.iters):
        inv.step()                                      # loss and d loss / d theta on the tape, then Adam
    before, after = scene_theta.group_errors(start, truth), scene_theta.group_errors(inv.theta(), truth)
    print(f"{args.width}x{args.height}, {inv.iteration} iterations: loss {inv.losses[0]:.2e} -> {inv.losses[-1]:.2e}, "
          f"joints off by {before['joints']:.1f} -> {after['joints']:.3f} degrees (worst joint)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    picture = side_by_side(inv.current_image(), target)  # current | target | |difference| x4, sRGB
    image_io.write_png(out / "invert.png", picture)
    print(f"wrote {out / 'invert.png'} (current | target | difference)")
    inv.destroy()
    if not args.headless:
        from app.ui.viewer import show_image

        show_image("inverse_render: current | target | |difference| x4", picture)
    if not (np.isfinite(inv.losses).all() and after["joints"] <= 1.0):
        raise SystemExit(f"inverse_render: the joints ended {after['joints']:.2f} degrees off (goal <= 1)")
