"""The triangle BVH: tree invariants, the point-triangle function, and the three-way validation.

Oracles: analytic closest points for one triangle (each Voronoi region), the brute-force
kernel (every face for every point), a fresh build (for refit), and a second backend
(vulkan on lavapipe through a worker). Distances are compared, not face ids: a query
closest to a shared vertex or edge has several correct faces.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.triangle_bvh import (
    TriangleBVH,
    leaf_starts,
    median_split_order,
    run_closest_point,
    sample_queries,
    tree_depth,
)
from engine.errors import UserError
from engine.meshgen import icosphere
from engine.mesh_io import load_mesh

ASSETS = Path(__file__).resolve().parent.parent / "assets"
REAL = ("spot", "blub", "penguin")
REL_TOL = 1e-6


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)))


@pytest.mark.parametrize("n_faces,leaf_size", [(1, 4), (5, 4), (20480, 4), (20480, 2), (1000, 3), (1654, 8)])
def test_tree_shape_bounds_leaves_and_depth(n_faces, leaf_size):
    depth = tree_depth(n_faces, leaf_size)
    sizes = np.diff(leaf_starts(n_faces, depth))
    assert sizes.sum() == n_faces and sizes.max() <= leaf_size and sizes.min() >= 1
    assert depth == 0 or -(-n_faces // (1 << (depth - 1))) > leaf_size  # no level more than needed


def test_median_split_order_is_a_permutation_that_separates_halves():
    rng = np.random.default_rng(1)
    centroids = rng.normal(size=(1000, 3)) * [10.0, 1.0, 1.0]  # longest axis: x
    order = median_split_order(centroids, 3)
    assert sorted(order) == list(range(1000))
    assert centroids[order[:500], 0].max() <= centroids[order[500:], 0].min()


def test_closest_point_on_triangle_every_region(ti_cpu):
    a, b, c = [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    bvh = TriangleBVH.build(np.array([a, b, c]), np.array([[0, 1, 2]]))
    cases = {  # query -> (closest point, barycentrics)
        (-1.0, -1.0, 0.5): ([0, 0, 0], [1, 0, 0]),        # vertex A
        (2.0, -0.5, -1.0): ([1, 0, 0], [0, 1, 0]),        # vertex B
        (-0.5, 2.0, 0.0): ([0, 1, 0], [0, 0, 1]),         # vertex C
        (0.25, -1.0, 2.0): ([0.25, 0, 0], [0.75, 0.25, 0]),  # edge AB
        (-3.0, 0.5, 0.0): ([0, 0.5, 0], [0.5, 0, 0.5]),   # edge AC
        (1.0, 1.0, -1.0): ([0.5, 0.5, 0], [0, 0.5, 0.5]),  # edge BC
        (0.25, 0.5, 0.75): ([0.25, 0.5, 0], [0.25, 0.25, 0.5]),  # face
    }
    found = bvh.closest_points(np.array(list(cases), np.float32))
    for i, (query, (point, bary)) in enumerate(cases.items()):
        np.testing.assert_allclose(found["point"][i], point, atol=1e-7)
        np.testing.assert_allclose(found["bary"][i], bary, atol=1e-7)
        np.testing.assert_allclose(found["dist2"][i], np.sum((np.array(query) - point) ** 2), rtol=1e-6)
    bvh.destroy()


def test_degenerate_triangle_gives_finite_answers(ti_cpu):
    vertices = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [0, 0, 0]], np.float64)  # collinear, and a repeated corner
    bvh = TriangleBVH.build(vertices, np.array([[0, 1, 2], [0, 3, 1]]))
    found = bvh.closest_points(np.array([[0.5, 1.0, 0.0], [3.0, 0.0, 1.0], [-1.0, 0.0, 0.0]]))
    np.testing.assert_allclose(found["dist2"], [1.0, 2.0, 1.0], rtol=1e-6)
    assert np.isfinite(found["bary"]).all()
    bvh.destroy()


def _three_way(vertices, faces, n):
    points = sample_queries(vertices, faces, n, seed=7)
    out = run_closest_point(vertices, faces, points)
    assert int(out["misses"]) == 0 and int(out["overflows"]) == 0
    assert rel_err(out["dist2"], out["brute_dist2"]) <= REL_TOL
    corners = vertices[faces[out["face"]]]
    np.testing.assert_allclose(np.einsum("ij,ijk->ik", out["bary"], corners), out["point"], atol=1e-5)
    np.testing.assert_allclose(np.sum((points - out["point"]) ** 2, axis=1), out["dist2"], rtol=1e-4, atol=1e-9)
    return points, out


def test_icosphere_bvh_equals_brute_force(ti_cpu):
    vertices, faces = icosphere(5)
    _, out = _three_way(vertices, faces, 512)
    # on the unit sphere the distance is ~ | |p| - 1 | (up to the chord sag of the facets, < 3e-4)
    points = sample_queries(vertices, faces, 512, seed=7)
    np.testing.assert_allclose(np.sqrt(out["dist2"]), np.abs(np.linalg.norm(points, axis=1) - 1.0), atol=3e-4)


@pytest.mark.parametrize("name", REAL)
def test_real_mesh_bvh_equals_brute_force(ti_cpu, name):
    mesh = load_mesh(ASSETS / f"{name}.obj")
    _three_way(mesh.vertices, mesh.faces, 256)


def assert_bounds_enclose(bvh: TriangleBVH) -> None:
    """Each box is its children's union (leaves: of their triangles); each sphere holds its triangle."""
    boxes = bvh.boxes.to_numpy()
    first_leaf = (1 << bvh.depth) - 1
    for parent in range(first_leaf):
        left, right = boxes[2 * parent + 1], boxes[2 * parent + 2]
        np.testing.assert_array_equal(boxes[parent, :3], np.minimum(left[:3], right[:3]))
        np.testing.assert_array_equal(boxes[parent, 3:], np.maximum(left[3:], right[3:]))
    tris = bvh.tris.to_numpy().reshape(-1, 3, 3)
    starts = bvh.leaf_start.to_numpy()
    for k in range(len(starts) - 1):
        corners = tris[starts[k]:starts[k + 1]].reshape(-1, 3)
        np.testing.assert_array_equal(boxes[first_leaf + k, :3], corners.min(axis=0))
        np.testing.assert_array_equal(boxes[first_leaf + k, 3:], corners.max(axis=0))
    spheres = bvh.spheres.to_numpy()
    reach = np.linalg.norm(tris - spheres[:, None, :3], axis=2).max(axis=1)
    assert (reach <= spheres[:, 3]).all()


@pytest.mark.parametrize("subdiv", [1, 4])  # depth 3 (all top levels, serial) and 9 (parallel levels too)
def test_refit_bounds_after_moving_vertices(ti_cpu, subdiv):
    vertices, faces = icosphere(subdiv)
    bvh = TriangleBVH.build(vertices, faces)
    bvh.vertices.from_numpy((vertices * [2.0, 0.5, 1.0] + 0.3).astype(np.float32))
    bvh.refit()
    assert_bounds_enclose(bvh)
    bvh.destroy()


def test_refit_equals_rebuild(ti_cpu):
    vertices, faces = icosphere(4)
    rng = np.random.default_rng(3)
    moved = vertices * [1.5, 0.6, 1.0] + 0.05 * rng.normal(size=vertices.shape)  # a large, uneven deformation
    bvh = TriangleBVH.build(vertices, faces)
    before = bvh.boxes.to_numpy()
    bvh.vertices.from_numpy(moved.astype(np.float32))
    bvh.refit()
    boxes = bvh.boxes.to_numpy()
    assert not np.array_equal(before, boxes)
    assert_bounds_enclose(bvh)
    points = sample_queries(moved, faces, 512, seed=5)
    refitted = bvh.closest_points(points)
    fresh = TriangleBVH.build(moved, faces)
    assert rel_err(refitted["dist2"], fresh.closest_points(points)["dist2"]) <= REL_TOL
    assert rel_err(refitted["dist2"], fresh.brute_force(points)["dist2"]) <= REL_TOL
    for tree in (bvh, fresh):
        tree.destroy()


def test_refit_is_deterministic(ti_cpu):
    vertices, faces = icosphere(3)
    bvh = TriangleBVH.build(vertices, faces)
    first = bvh.boxes.to_numpy()
    for _ in range(3):
        bvh.refit()
        np.testing.assert_array_equal(bvh.boxes.to_numpy(), first)
    bvh.destroy()


def test_nan_query_is_a_counted_miss(ti_cpu):
    vertices, faces = icosphere(2)
    bvh = TriangleBVH.build(vertices, faces)
    found = bvh.closest_points(np.array([[np.nan, 0.0, 0.0], [0.0, 0.0, 2.0]]))
    assert found["face"][0] == -1 and found["face"][1] >= 0
    assert bvh.counters() == {"misses": 1, "overflows": 0}
    bvh.reset_counters()
    assert bvh.counters() == {"misses": 0, "overflows": 0}
    bvh.destroy()


@pytest.mark.parametrize("vertices,faces,words", [
    (np.zeros((0, 3)), np.zeros((0, 3), int), "vertices"),
    (np.zeros((3, 3)), np.array([[0, 1, 3]]), "outside"),
    (np.zeros((3, 3)), np.array([[0.0, 1.0, 2.0]]), "integer"),
    (np.array([[0, 0, 0], [1, 0, np.inf], [0, 1, 0]]), np.array([[0, 1, 2]]), "infinite"),
])
def test_bad_mesh_is_a_user_error(ti_cpu, vertices, faces, words):
    with pytest.raises(UserError, match=words):
        TriangleBVH.build(vertices, faces)


def test_bad_points_are_a_user_error(ti_cpu):
    vertices, faces = icosphere(1)
    bvh = TriangleBVH.build(vertices, faces)
    with pytest.raises(UserError, match="query points"):
        bvh.closest_points(np.zeros((4, 2)))
    bvh.destroy()


def test_backends_agree_with_each_other_and_brute_force(worker, ti_cpu):
    """Backend B (each worker) == brute force there == backend A (this process, cpu)."""
    vertices, faces = icosphere(3)
    mesh = load_mesh(ASSETS / "spot.obj")
    for v, f in ((vertices, faces), (mesh.vertices, mesh.faces)):
        points = sample_queries(v, f, 128, seed=11)
        here = run_closest_point(v, f, points)
        there = worker.call("closest_point", vertices=v, faces=f, points=points)
        assert int(there["misses"]) == 0 and int(there["overflows"]) == 0
        assert rel_err(there["dist2"], there["brute_dist2"]) <= REL_TOL
        assert rel_err(there["dist2"], here["dist2"]) <= REL_TOL


def test_refit_equals_rebuild_on_each_backend(worker):
    vertices, faces = icosphere(2)
    moved = vertices * [0.5, 1.2, 0.9] + 0.1
    out = worker.call("bvh_refit_vs_rebuild", vertices=vertices, faces=faces, moved=moved,
                      points=sample_queries(moved, faces, 128, seed=2))
    assert rel_err(out["refit_dist2"], out["rebuilt_dist2"]) <= REL_TOL


def test_stack_overflow_is_counted_and_raised(ti_cpu):
    vertices, faces = icosphere(3)
    bvh = TriangleBVH.build(vertices, faces, stack_size=2)  # depth 9 needs up to 9 entries
    with pytest.raises(RuntimeError, match="overflowed"):
        bvh.closest_points(sample_queries(vertices, faces, 64, seed=1))
    assert bvh.counters()["overflows"] > 0
    bvh.destroy()


def test_refit_and_query_under_a_paused_tape_record_nothing(ti_cpu):
    from engine.autodiff.tape import Tape

    vertices, faces = icosphere(2)
    bvh = TriangleBVH.build(vertices, faces)
    points = sample_queries(vertices, faces, 64, seed=4)
    expected = bvh.brute_force(points)["dist2"]
    tape = Tape()
    with tape, tape.pause():
        bvh.refit()
        found = bvh.closest_points(points)
    assert tape.entries == []
    assert rel_err(found["dist2"], expected) <= REL_TOL
    bvh.destroy()


def numpy_dist2(p: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared distance from p (3,) to triangles (F, 3) in float64 by a different method than
    the kernels': projection onto the plane if it falls inside, else the nearest of the three edges."""
    n = np.cross(b - a, c - a)
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    q = p - np.sum((p - a) * n, axis=1, keepdims=True) * n
    inside = np.ones(len(a), bool)
    for u, v in ((a, b), (b, c), (c, a)):
        inside &= np.sum(np.cross(v - u, q - u) * n, axis=1) >= 0
    best = np.where(inside, np.sum((p - q) ** 2, axis=1), np.inf)
    for u, v in ((a, b), (b, c), (c, a)):
        t = np.clip(np.sum((p - u) * (v - u), axis=1) / np.sum((v - u) ** 2, axis=1), 0.0, 1.0)
        best = np.minimum(best, np.sum((p - (u + t[:, None] * (v - u))) ** 2, axis=1))
    return best


def test_distances_match_an_independent_float64_oracle(ti_cpu):
    vertices, faces = icosphere(3)
    points = sample_queries(vertices, faces, 64, seed=9)
    bvh = TriangleBVH.build(vertices, faces)
    found = bvh.closest_points(points)
    corners = vertices.astype(np.float32).astype(np.float64)[faces]  # the float32 mesh the BVH holds
    exact = np.array([numpy_dist2(p.astype(np.float64), *corners.transpose(1, 0, 2)).min() for p in points])
    # float32 arithmetic: |d2 - exact| within a few ulps of the coordinates times the distance
    np.testing.assert_allclose(found["dist2"], exact, rtol=1e-5, atol=1e-9)
    bvh.destroy()


def test_morton_order_is_the_z_curve():
    from engine.triangle_bvh import morton_order

    corners = np.array([(x, y, z) for z in (0, 1) for y in (0, 1) for x in (0, 1)], dtype=float)[::-1]
    ordered = corners[morton_order(corners, bits=1)]
    # code = x + 2y + 4z for one bit per axis
    np.testing.assert_array_equal(ordered @ np.array([1, 2, 4]), np.arange(8))
    points = np.random.default_rng(0).normal(size=(1000, 3))
    order = morton_order(points)
    assert sorted(order) == list(range(1000))
    # neighbours along the curve are closer than random pairs, on average
    along = np.linalg.norm(np.diff(points[order], axis=0), axis=1).mean()
    assert along < 0.5 * np.linalg.norm(np.diff(points, axis=0), axis=1).mean()
