"""Inverse rendering: recover the robot arm's joint angles from a picture, through the differentiable ray march.

The target is the differentiable renderer's image of the timeline's frame at t; the start moves
every joint by 15-20 degrees (seeded). `Recovery` (app.scenes.inverse_render) first asks the exact
image Jacobian which joints the picture determines, then searches the basin with CMA-ES on the
half-resolution image and polishes with Gauss-Newton (Levenberg-Marquardt) steps on the exact Jacobian
(the march untaped, hit points corrected by a taped Newton step, silhouettes by a soft coverage, the
kinematics on the device); its verdict says whether every determined joint is within 0.5 degrees.
`python -m app invert` is the full command.

    python examples/inverse_render.py                   # then a window shows target | current | |difference|
    python examples/inverse_render.py --t 0.5 --arch vulkan --headless
"""
from pathlib import Path

from app.flags import example_parser
from app.scenes.inverse_render import InvertSettings, Recovery, render_target, renderer, side_by_side, verdict_line
from app.scenes.robot_arm import theta_at
from engine import backend, image_io, scene_theta

if __name__ == "__main__":
    parser = example_parser(__doc__)                    # --arch, --headless
    parser.add_argument("--t", type=float, default=0.1, help="time on the timeline of the target (default 0.1)")
    parser.add_argument("--evals", type=int, default=300, help="renders of the search before the polish (default 300)")
    parser.add_argument("--width", type=int, default=256, help="pixels (default 256)")
    parser.add_argument("--height", type=int, default=128, help="pixels (default 128)")
    parser.add_argument("--out", default="out/examples", help="folder for invert.png (default out/examples)")
    args = parser.parse_args()
    print(f"backend: {backend.init(args.arch).name}")

    truth = theta_at(args.t)                                           # 21 scene parameters (engine.scene_theta.NAMES)
    target = render_target(truth, args.width, args.height)             # (H, W, 3) float32, linear
    start = scene_theta.perturb(truth, {"joints": 20.0}, seed=2)       # every joint 15..20 degrees off
    settings = InvertSettings(search_evaluations=args.evals, groups=("joints",))  # only the joints
    rec = Recovery(target, start, truth, args.width, args.height, settings=settings)
    for phase in rec.steps():                           # identify, search, Levenberg-Marquardt (and scans)
        pass
    verdict = rec.verdict()
    before, after = scene_theta.group_errors(start, truth), scene_theta.group_errors(rec.best_theta, truth)
    print(f"{args.width}x{args.height}, {rec.step_count} steps: image loss {rec.start_loss:.2e} -> {rec.best_loss:.2e}, "
          f"joints off by {before['joints']:.1f} -> {after['joints']:.3f} degrees (worst joint): {verdict_line(verdict)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    r = renderer()                                      # left at the recovered theta
    picture = side_by_side(r.render(), target, f"t = {args.t:g}: {verdict['status']}")
    image_io.write_png(out / "invert.png", picture)
    print(f"wrote {out / 'invert.png'} (target | current | difference)")
    if not args.headless:
        from app.ui.viewer import show_image

        show_image("inverse_render: target | current | |difference| x4", picture)
    if verdict["status"] != "converged":
        raise SystemExit(f"inverse_render: {verdict_line(verdict)}")
