"""How close a fitted mesh is to its target, measured the same way for every job of a sweep.

A fit's own final loss depends on its settings (its seed draws its target samples, `--samples`
sets how many), so it cannot rank a sweep. `surface_distance` samples both surfaces afresh with
one fixed seed and measures, in the target's normalised frame ([-1, 1]^3):

- `chamfer`: mean squared distance from target samples to the fit plus from fit samples to the
  target (the fit's loss, on samples no job chose);
- `hausdorff`: the largest of those distances (not squared): the worst spot.

Example (on a running backend): `surface_distance("spot", "out/fit/final.obj")` ->
{"chamfer": 1.9e-4, "hausdorff": 0.061}.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLES = 16384  # per surface
SEED = 20261130  # no fit's seed: the same samples for every job


def surface_distance(target: str | Path, fitted_obj: str | Path) -> dict[str, float]:
    """Symmetric distances between target `target` (a name or path, as `fit --target`) and the mesh
    in `fitted_obj` (written by the fit, in the target file's coordinates): {"chamfer", "hausdorff"}."""
    from app.scenes.shape_fit import load_target
    from engine.triangle_bvh import TriangleBVH
    from engine.chamfer_loss import sample_surface
    from engine.mesh_io import load_mesh, make_mesh

    goal = load_target(target)
    raw = load_mesh(fitted_obj, normalise=False)
    fitted = make_mesh((raw.vertices - goal.centre) / goal.scale, raw.faces, normalise=False)
    squared = []
    for surface, samples_of in ((fitted, goal), (goal, fitted)):
        bvh = TriangleBVH.build(surface.vertices, surface.faces)
        squared.append(bvh.closest_points(sample_surface(samples_of, SAMPLES, SEED))["dist2"].astype(np.float64))
        bvh.destroy()
    return {"chamfer": float(sum(d.mean() for d in squared)),
            "hausdorff": float(np.sqrt(max(d.max() for d in squared)))}
