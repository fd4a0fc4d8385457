"""Closest points on a triangle mesh: a BVH on the device, checked against testing every triangle.

The BVH answers each query with the nearest face, its barycentrics, the point and the squared
distance; `brute_force` (every face for every point) must agree. After the vertices move,
`refit` updates the bounds on the device, and the answers agree again. The window shows the
distance to the mesh over the plane z = 0.

    python examples/closest_points.py                   # then a window shows the distance field
    python examples/closest_points.py --arch vulkan --headless
"""

import numpy as np

from app.flags import example_parser
from engine import backend, image_io
from engine.triangle_bvh import TriangleBVH
from engine.meshgen import blob


def disagreement(bvh: TriangleBVH, points: np.ndarray) -> float:
    """max |d2_bvh - d2_brute| / max(d2_brute, 1e-12): faces may differ on shared edges, distances may not."""
    hits, oracle = bvh.closest_points(points), bvh.brute_force(points)
    return float((np.abs(hits["dist2"] - oracle["dist2"]) / np.maximum(oracle["dist2"], 1e-12)).max())


if __name__ == "__main__":
    args = example_parser(__doc__).parse_args()         # --arch, --headless
    print(f"backend: {backend.init(args.arch).name}")

    vertices, faces = blob(3)                           # numpy (V, 3) float, (F, 3) int
    bvh = TriangleBVH.build(vertices, faces)            # or TriangleBVH(vertex_field, face_field)
    points = np.random.default_rng(0).uniform(-2.0, 2.0, (4096, 3))
    hits = bvh.closest_points(points)                   # {"face", "bary", "point", "dist2"} for (N, 3) points
    print(f"{len(faces)} faces, {len(points)} queries: nearest face of the first {hits['face'][:4]}, "
          f"misses {bvh.counters()['misses']}")
    before = disagreement(bvh, points)
    bvh.vertices.from_numpy((vertices * [1.5, 0.7, 1.0]).astype(np.float32))   # the mesh moves on the device...
    bvh.refit()                                         # ...and the bounds follow, on the device
    after = disagreement(bvh, points)
    print(f"BVH vs brute force, max relative difference of squared distances: {before:.1e}, after refit {after:.1e}")

    n = 256
    u = np.linspace(-2.0, 2.0, n)
    gx, gy = np.meshgrid(u, u[::-1])
    plane = np.stack([gx, gy, np.zeros_like(gx)], axis=-1).reshape(-1, 3)
    distance = np.sqrt(bvh.closest_points(plane)["dist2"]).reshape(n, n)
    if not args.headless:
        from app.ui.viewer import show_image

        show_image("closest_points: distance to the mesh on z = 0", image_io.heatmap(distance, 0.0, 1.5))
    if max(before, after) > 1e-5 or bvh.counters()["misses"]:
        raise SystemExit("closest_points: the BVH disagrees with brute force")
