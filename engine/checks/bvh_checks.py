"""Checks of the BVH: seeded query points, and its parity computations against the brute-force oracle.

`sample_queries` (half near the surface, half far) feeds the claim closest_point, the benchmarks' tests and
tests/test_bvh.py; "closest_point" and "bvh_refit_vs_rebuild" (engine.computations) run on any backend.
"""
from __future__ import annotations

import numpy as np

from engine.triangle_bvh import QueryBuffers, TriangleBVH


def sample_queries(vertices: np.ndarray, faces: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n query points, seeded: half near the surface (a random surface point moved along its face
    normal by +-0.1 % to 5 % of the mesh's size), half far (uniform in the mesh's box grown 2x)."""
    rng = np.random.default_rng(seed)
    vertices = np.asarray(vertices, np.float64)
    lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    size = float(np.max(hi - lo))
    near = n // 2
    corners = vertices[faces[rng.integers(0, len(faces), near)]]
    weights = rng.dirichlet(np.ones(3), near)
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    length = np.linalg.norm(normals, axis=1, keepdims=True)
    normals = np.divide(normals, length, out=np.zeros_like(normals), where=length > 0)  # degenerate: no offset
    offsets = rng.uniform(0.001, 0.05, near) * size * rng.choice([-1.0, 1.0], near)
    surface = np.einsum("ij,ijk->ik", weights, corners) + normals * offsets[:, None]
    centre, extent = (lo + hi) / 2, hi - lo
    far = centre + rng.uniform(-1.0, 1.0, (n - near, 3)) * extent  # centre +- extent: the box grown 2x
    return np.concatenate([surface, far]).astype(np.float32)


def run_closest_point(vertices: np.ndarray, faces: np.ndarray, points: np.ndarray) -> dict[str, np.ndarray]:
    """Parity computation: BVH answers (numpy path; `field_dist2` from `query` on fields, `warm_dist2`
    from a warm `query` seeded with mostly wrong faces and some -1) and the brute-force oracle's."""
    bvh = TriangleBVH.build(vertices, faces)
    found = bvh.closest_points(points)
    buffers = QueryBuffers(len(points))
    n = buffers.load(points)
    bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n)
    on_fields = buffers.results(n)
    buffers.face.from_numpy((np.arange(buffers.capacity, dtype=np.int32) * 7919 + 1) % (len(faces) + 1) - 1)
    bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n, warm=True)  # wrong hints
    warm = buffers.results(n)
    buffers.group.destroy()
    oracle = bvh.brute_force(points)
    counters = bvh.counters()
    bvh.destroy()
    return {"face": found["face"], "bary": found["bary"], "point": found["point"], "dist2": found["dist2"],
            "field_dist2": on_fields["dist2"], "warm_dist2": warm["dist2"], "brute_dist2": oracle["dist2"],
            "misses": np.array(counters["misses"]), "overflows": np.array(counters["overflows"])}


def run_refit_vs_rebuild(vertices: np.ndarray, faces: np.ndarray, moved: np.ndarray,
                         points: np.ndarray) -> dict[str, np.ndarray]:
    """Parity computation: query a tree built on `vertices` then refit on `moved`, and a fresh build on `moved`."""
    bvh = TriangleBVH.build(vertices, faces)
    bvh.vertices.from_numpy(np.asarray(moved, np.float32))
    bvh.refit()
    refitted = bvh.closest_points(points)
    bvh.destroy()
    fresh = TriangleBVH.build(moved, faces)
    rebuilt = fresh.closest_points(points)
    fresh.destroy()
    return {"refit_dist2": refitted["dist2"], "rebuilt_dist2": rebuilt["dist2"]}
