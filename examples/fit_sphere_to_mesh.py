"""Fit a sphere to a mesh: an icosphere shrink-wraps onto Spot the cow with Chamfer through the BVH + Adam.

Each iteration finds closest points both ways (untaped), differentiates the distances to
them on the tape, takes an Adam step on the device and a Laplacian shrink-wrap step; the
settings default to the recommended ones (app/scenes/fit_settings.py). The loss must fall
by 2.5 orders of magnitude (the project's goal on real meshes); the fitted mesh is written
in the target file's coordinates.

    python examples/fit_sphere_to_mesh.py               # then a window shows target and fit side by side
    python examples/fit_sphere_to_mesh.py --target blub --iters 400 --arch vulkan --headless
"""
from pathlib import Path

import numpy as np

from app.flags import example_parser
from app.mesh_preview import side_by_side
from app.scenes.fit_settings import TARGETS
from app.scenes.shape_fit import ShapeFit
from engine import backend

if __name__ == "__main__":
    parser = example_parser(__doc__)                    # --arch, --headless
    parser.add_argument("--target", default="spot", help=f"one of {', '.join(TARGETS)}, or a mesh file")
    parser.add_argument("--iters", type=int, default=200, help="iterations (default 200)")
    parser.add_argument("--out", default="out/examples", help="folder for fit_<target>.obj and .png")
    args = parser.parse_args()
    print(f"backend: {backend.init(args.arch).name}")

    fit = ShapeFit(args.target, subdiv=4, schedule_iters=args.iters)  # a name or a mesh file path
    for _ in range(args.iters):
        fit.step()                                      # one iteration; returns the loss before the update
    print(f"{args.target}: loss {fit.losses[0]:.2e} -> {fit.losses[-1]:.2e} in {fit.iteration} iterations, "
          f"{fit.orders():.2f} orders of decrease, {fit.misses()} misses")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fit.export_mesh(out / f"fit_{Path(args.target).stem}.obj")   # in the target file's coordinates
    picture = side_by_side([(fit.target.vertices, fit.target.faces), (fit.vertices(), fit.faces)], size=320,
                           extent=1.1)
    picture.save(out / f"fit_{Path(args.target).stem}.png")
    print(f"wrote {out}/fit_{Path(args.target).stem}.obj and .png (target left, fit right)")
    orders = fit.orders()
    fit.destroy()
    if not args.headless:
        from app.ui.viewer import show_image

        show_image(f"fit_sphere_to_mesh: {args.target} (left) and the fit (right)", np.asarray(picture))
    if orders < 2.5:
        raise SystemExit(f"fit_sphere_to_mesh: only {orders:.2f} orders of decrease")
