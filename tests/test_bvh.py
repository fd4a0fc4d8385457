"""The triangle BVH: tree invariants, its bounds, the point-triangle function, and the three-way validation.

Oracles: analytic closest points for one triangle (each Voronoi region), the brute-force
kernel (every face for every point), a float64 numpy check of every stored bound against
the corners it must hold, a fresh build (for refit), and a second backend (vulkan on
lavapipe through a worker). Distances are compared, not face ids: a query closest to a
shared vertex or edge has several correct faces.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.errors import UserError
from engine.meshgen import icosphere
from engine.mesh_io import load_mesh
from engine.checks.bvh_checks import run_closest_point, sample_queries
from engine.triangle_bvh import SORT_MIN, QueryBuffers, TriangleBVH, leaf_starts, tree_array, tree_depth

ASSETS = Path(__file__).resolve().parent.parent / "assets"
REAL = ("spot", "blub", "penguin")
REL_TOL = 1e-6


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)))


@pytest.mark.parametrize("n_faces,leaf_size", [(1, 4), (5, 4), (17, 4), (20480, 4), (20480, 16), (1000, 5),
                                               (1654, 8), (254080, 16)])
def test_tree_shape_bounds_leaves_and_depth(n_faces, leaf_size):
    depth = tree_depth(n_faces, leaf_size)
    sizes = np.diff(leaf_starts(n_faces, depth))
    assert len(sizes) == 4 ** depth and sizes.sum() == n_faces
    assert sizes.max() <= leaf_size and sizes.min() >= 1  # no empty leaf (leaf sizes of at least 4)
    assert depth == 0 or -(-n_faces // 4 ** (depth - 1)) > leaf_size  # no level more than needed


def _centroid_mesh(centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tiny triangles around the given centroids (exactly: the offsets cancel)."""
    offsets = np.array([[1e-3, 0, 0], [0, 1e-3, 0], [-1e-3, -1e-3, 0]])
    vertices = (centroids[:, None, :] + offsets).reshape(-1, 3)
    return vertices, np.arange(len(vertices)).reshape(-1, 3)


def test_build_is_a_median_split_along_each_nodes_longest_axis(ti_cpu):
    rng = np.random.default_rng(1)
    centroids = rng.normal(size=(1000, 3)) * [10.0, 3.0, 1.0]
    bvh = TriangleBVH.build(*_centroid_mesh(centroids), leaf_size=4)
    order = bvh.order.to_numpy()
    assert sorted(order) == list(range(1000))
    sorted_centroids = bvh.centroids.to_numpy()  # the build's centroids, in tree order
    starts = bvh.leaf_start.to_numpy()
    levels = 2 * bvh.depth
    for level in range(levels):  # every binary node: left half <= right half along its longest axis
        for j in range(1 << level):
            start, end = starts[j << (levels - level)], starts[(j + 1) << (levels - level)]
            mid = starts[(2 * j + 1) << (levels - level - 1)]
            node = sorted_centroids[start:end]
            axis = np.argmax(node.max(axis=0) - node.min(axis=0))
            assert node[: mid - start, axis].max() <= node[mid - start:, axis].min()
    np.testing.assert_allclose(sorted_centroids, centroids[order], atol=1e-5)
    bvh.destroy()


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


def _slab_cylinder_holds(points: np.ndarray, bound: np.ndarray) -> bool:
    """Every point (N, 3) inside the node bound (lo, hi, axis, centre, radius, thickness), in float64."""
    lo, hi, axis, centre = bound[0:3], bound[3:6], bound[6:9], bound[9:12]
    radius, thickness = bound[12] * (1 + 1e-6) + 1e-7, bound[13] * (1 + 1e-6) + 1e-7
    w = points - centre
    h = w @ axis
    lateral = np.linalg.norm(w - h[:, None] * axis, axis=1)
    return bool((points >= lo).all() and (points <= hi).all() and (np.abs(h) <= thickness).all()
                and (lateral <= radius).all())


def assert_bounds_hold(bvh: TriangleBVH) -> None:
    """Every node's record is its children's bounds; every bound holds all the corners below it;
    every slot's disc holds its triangle's corners and empty slots are never near."""
    from engine.kernels.bvh_query import BOUND_WIDTH

    nodes = tree_array(bvh.nodes).reshape(-1, BOUND_WIDTH, 4)
    bounds = bvh.node_bound.to_numpy().astype(np.float64)
    for i in range(bvh.n_inner):
        np.testing.assert_array_equal(nodes[i].T, bounds[4 * i + 1:4 * i + 5])
    # packets hold four slots lane by lane: (packet, value, lane) -> (leaf, slot, value)
    slots = lambda array, width: (tree_array(array).astype(np.float64).reshape(-1, width, 4)  # noqa: E731
                                  .transpose(0, 2, 1).reshape(bvh.n_leaves, bvh.width, width))
    corners = slots(bvh.corner_packets, 9).reshape(bvh.n_leaves, bvh.width, 3, 3)
    discs = slots(bvh.bound_packets, 8)
    counts = np.diff(bvh.leaf_start.to_numpy())
    leaf_corners = [corners[k, :counts[k]].reshape(-1, 3) for k in range(bvh.n_leaves)]
    for level in range(bvh.depth + 1):
        first = (4 ** level - 1) // 3
        span = 4 ** (bvh.depth - level)  # leaves under a node of this level
        for j in range(4 ** level):
            points = np.concatenate(leaf_corners[j * span:(j + 1) * span])
            assert _slab_cylinder_holds(points, bounds[first + j]), (level, j)
    for k in range(bvh.n_leaves):
        normal, centre, radius = discs[k, :, 0:3], discs[k, :, 3:6], discs[k, :, 6]
        reach = np.linalg.norm(corners[k] - centre[:, None, :], axis=2).max(axis=1)
        assert (reach[:counts[k]] <= radius[:counts[k]] * (1 + 1e-6) + 1e-7).all()
        np.testing.assert_allclose(np.linalg.norm(normal[:counts[k]], axis=1), 1.0, atol=1e-6)
        assert np.isnan(radius[counts[k]:]).all() and np.isnan(corners[k, counts[k]:]).all()  # empty: never near


@pytest.mark.parametrize("subdiv", [0, 3])  # depth 1 (the root's children are leaves) and 4
def test_refit_bounds_after_moving_vertices(ti_cpu, subdiv):
    vertices, faces = icosphere(subdiv)
    bvh = TriangleBVH.build(vertices, faces)
    bvh.vertices.from_numpy((vertices * [2.0, 0.5, 1.0] + 0.3).astype(np.float32))
    bvh.refit()
    assert_bounds_hold(bvh)
    bvh.destroy()


def test_refit_equals_rebuild(ti_cpu):
    vertices, faces = icosphere(4)
    rng = np.random.default_rng(3)
    moved = vertices * [1.5, 0.6, 1.0] + 0.05 * rng.normal(size=vertices.shape)  # a large, uneven deformation
    bvh = TriangleBVH.build(vertices, faces)
    before = tree_array(bvh.nodes)
    bvh.vertices.from_numpy(moved.astype(np.float32))
    bvh.refit()
    assert not np.array_equal(before, tree_array(bvh.nodes))
    assert_bounds_hold(bvh)
    points = sample_queries(moved, faces, 512, seed=5)
    refitted = bvh.closest_points(points)
    fresh = TriangleBVH.build(moved, faces)
    assert rel_err(refitted["dist2"], fresh.closest_points(points)["dist2"]) <= REL_TOL
    assert rel_err(refitted["dist2"], fresh.brute_force(points)["dist2"]) <= REL_TOL
    for tree in (bvh, fresh):
        tree.destroy()


def test_refit_and_rebuild_are_deterministic(ti_cpu):
    vertices, faces = icosphere(3)
    bvh = TriangleBVH.build(vertices, faces)
    arrays = (bvh.order, bvh.nodes, bvh.node_bound, bvh.corner_packets, bvh.bound_packets)
    first = [tree_array(array) for array in arrays]
    for step in (bvh.refit, bvh.rebuild, bvh.refit):
        step()
        for array, expected in zip(arrays, first):
            np.testing.assert_array_equal(tree_array(array), expected)
    bvh.destroy()


@pytest.mark.parametrize("group_levels,parallel_nodes", [(0, 1024), (1, 4), (2, 4), (6, 1024)])
def test_refit_is_the_same_however_it_is_split(ti_cpu, monkeypatch, group_levels, parallel_nodes):
    """The refit's groups of leaves (each with its subtree in one thread), its parallel levels and its
    serial top give bit-identical trees whatever the split; (1, 4) and (2, 4) run levels above the
    groups in parallel launches, (6, 1024) groups more levels than the tree has."""
    import engine.triangle_bvh as triangle_bvh

    vertices, faces = icosphere(4)  # depth 4 at the default leaf size
    moved = (vertices * [1.3, 0.8, 1.0] + 0.1).astype(np.float32)
    trees = []
    for _ in range(2):  # the default split, then the one under test (a tree takes its groups when built)
        tree = TriangleBVH.build(vertices, faces)
        tree.vertices.from_numpy(moved)  # refitted from the unmoved tree's bounds
        tree.refit()
        trees.append(tree)
        monkeypatch.setattr(triangle_bvh, "REFIT_GROUP_LEVELS", group_levels)
        monkeypatch.setattr(triangle_bvh, "PARALLEL_NODES", parallel_nodes)
    for name in ("nodes", "node_bound", "corner_packets", "bound_packets"):
        np.testing.assert_array_equal(tree_array(getattr(trees[1], name)), tree_array(getattr(trees[0], name)))
    assert_bounds_hold(trees[1])
    for tree in trees:
        tree.destroy()


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


def test_bad_leaf_size_is_a_user_error(ti_cpu):
    vertices, faces = icosphere(1)
    with pytest.raises(UserError, match="leaf size"):
        TriangleBVH.build(vertices, faces, leaf_size=3)


def test_bad_points_are_a_user_error(ti_cpu):
    vertices, faces = icosphere(1)
    bvh = TriangleBVH.build(vertices, faces)
    with pytest.raises(UserError, match="query points"):
        bvh.closest_points(np.zeros((4, 2)))
    bvh.destroy()


def test_backends_agree_with_each_other_and_brute_force(worker, ti_cpu):
    """Backend B (each worker) == brute force there == backend A (this process, cpu), for a batch
    searched in the caller's order and one ordered on the device (SORT_MIN points or more)."""
    vertices, faces = icosphere(3)
    mesh = load_mesh(ASSETS / "spot.obj")
    for (v, f), n in (((vertices, faces), 128), ((mesh.vertices, mesh.faces), SORT_MIN + 1)):
        points = sample_queries(v, f, n, seed=11)
        here = run_closest_point(v, f, points)
        there = worker.call("closest_point", vertices=v, faces=f, points=points)
        assert int(there["misses"]) == 0 and int(there["overflows"]) == 0
        for out in (here, there):
            assert rel_err(out["dist2"], out["brute_dist2"]) <= REL_TOL
            np.testing.assert_array_equal(out["field_dist2"], out["dist2"])  # fields == numpy: one kernel
            assert rel_err(out["warm_dist2"], out["brute_dist2"]) <= REL_TOL  # seeded with wrong faces
        assert rel_err(there["dist2"], here["dist2"]) <= REL_TOL


def test_refit_equals_rebuild_on_each_backend(worker):
    vertices, faces = icosphere(2)
    moved = vertices * [0.5, 1.2, 0.9] + 0.1
    out = worker.call("bvh_refit_vs_rebuild", vertices=vertices, faces=faces, moved=moved,
                      points=sample_queries(moved, faces, 128, seed=2))
    assert rel_err(out["refit_dist2"], out["rebuilt_dist2"]) <= REL_TOL


def test_stack_overflow_is_counted_and_raised(ti_cpu):
    vertices, faces = icosphere(3)
    bvh = TriangleBVH.build(vertices, faces, stack_size=2)  # depth 4 may need up to 12 entries
    points = sample_queries(vertices, faces, 64, seed=1)
    with pytest.raises(RuntimeError, match="overflowed"):
        bvh.closest_points(points)
    assert bvh.counters()["overflows"] > 0
    bvh.reset_counters()
    buffers = QueryBuffers(64)
    buffers.load(points)
    bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, 64)
    with pytest.raises(RuntimeError, match="overflowed"):
        bvh.check_overflow()
    buffers.group.destroy()
    bvh.destroy()


@pytest.mark.parametrize("n", [SORT_MIN - 1, 4 * SORT_MIN])
def test_field_queries_in_either_order_equal_brute_force(ti_cpu, n):
    """`query` on fields, searched as given (below SORT_MIN, or `presorted`) or in Morton order:
    each answer lands at its point's own index, equal to the brute-force kernel's."""
    mesh = load_mesh(ASSETS / "penguin.obj")
    points = sample_queries(mesh.vertices, mesh.faces, n, seed=3)
    bvh = TriangleBVH.build(mesh.vertices, mesh.faces)
    expected = bvh.brute_force(points)["dist2"]
    buffers = QueryBuffers(n)
    buffers.load(points)
    for presorted in (False, True):
        buffers.dist2.fill(-1.0)
        bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n, presorted=presorted)
        found = buffers.results(n)
        assert rel_err(found["dist2"], expected) <= REL_TOL
        np.testing.assert_allclose(np.sum((points - found["point"]) ** 2, axis=1), found["dist2"], rtol=1e-4,
                                   atol=1e-9)
    assert bvh.counters() == {"misses": 0, "overflows": 0}
    buffers.group.destroy()
    bvh.destroy()


def test_array_queries_in_place_and_a_kept_order_answer_as_field_queries(ti_cpu):
    """`query` on ndarrays reads and writes them in place (no gather, no scatter); warm, it starts from the faces
    it overwrites; with `resort=False` a sorted batch reuses the last Morton order of its points after they moved.
    Every variant answers as the field query does, to the bit."""
    import taichi as ti

    mesh = load_mesh(ASSETS / "penguin.obj")
    n = 2 * SORT_MIN
    points = sample_queries(mesh.vertices, mesh.faces, n, seed=5).astype(np.float32)
    bvh = TriangleBVH.build(mesh.vertices, mesh.faces)
    buffers = QueryBuffers(n)
    arrays = {"points": ti.ndarray(ti.math.vec3, (n,)), "face": ti.ndarray(ti.i32, (n,)),
              "bary": ti.ndarray(ti.math.vec3, (n,)), "point": ti.ndarray(ti.math.vec3, (n,)),
              "dist2": ti.ndarray(ti.f32, (n,))}
    outs = [arrays[name] for name in ("face", "bary", "point", "dist2")]
    for step, resort in enumerate((True, False, False)):
        moved = points + np.float32(0.01 * step)  # the points move a little: the kept order is an old one
        buffers.load(moved)
        bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n, warm=step > 0)
        expected = buffers.results(n)  # a warm search may pick another face at a tie (a shared edge): warm both
        arrays["points"].from_numpy(moved)
        bvh.query(arrays["points"], *outs, n, warm=step > 0, resort=resort)
        for name, array in zip(("face", "bary", "point", "dist2"), outs):
            np.testing.assert_array_equal(array.to_numpy(), expected[name], err_msg=f"{name}, step {step}")
    assert bvh.counters() == {"misses": 0, "overflows": 0}
    buffers.group.destroy()
    bvh.destroy()


@pytest.mark.parametrize("n", [100, SORT_MIN + 5])
def test_warm_queries_equal_brute_force_whatever_the_hint(ti_cpu, n):
    """`query(warm=True)` seeds each search with the face out_face holds: the right one, a wrong
    one, -1 or an index outside the mesh (ignored). The distances are the brute-force kernel's
    either way, in the caller's order and in Morton order."""
    mesh = load_mesh(ASSETS / "blub.obj")
    points = sample_queries(mesh.vertices, mesh.faces, n, seed=4)
    bvh = TriangleBVH.build(mesh.vertices, mesh.faces)
    oracle = bvh.brute_force(points)
    rng = np.random.default_rng(0)
    hints = {"answers": oracle["face"], "random faces": rng.integers(0, len(mesh.faces), n),
             "mixed with invalid": np.where(rng.random(n) < 0.5, rng.integers(0, len(mesh.faces), n),
                                            rng.choice([-1, len(mesh.faces), 1 << 30], n))}
    buffers = QueryBuffers(n)
    buffers.load(points)
    for presorted in (False, True):
        for name, hint in hints.items():
            buffers.face.from_numpy(np.resize(np.asarray(hint, np.int32), buffers.capacity))
            bvh.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n,
                      presorted=presorted, warm=True)
            found = buffers.results(n)
            assert rel_err(found["dist2"], oracle["dist2"]) <= REL_TOL, name
            np.testing.assert_allclose(np.sum((points - found["point"]) ** 2, axis=1), found["dist2"], rtol=1e-4,
                                       atol=1e-9)
    assert bvh.counters() == {"misses": 0, "overflows": 0}
    buffers.group.destroy()
    bvh.destroy()


def test_points_on_the_surface_and_slivers_equal_brute_force(ti_cpu):
    """Exact ties (points on vertices, edges and faces, where several triangles are at distance 0
    or equally near) and slivers (normals that rounding makes inaccurate): the bounds' slack
    must never skip a triangle the brute force picks."""
    vertices, faces = icosphere(2)
    rng = np.random.default_rng(5)
    slivers = np.array([[0, 0, 0], [1, 1e-7, 0], [2, 0, 1e-7], [0.5, 0.5, 0.5], [0.5, 0.5 + 1e-6, 0.5]])
    vertices = np.concatenate([vertices, slivers])
    v0 = len(vertices) - len(slivers)
    faces = np.concatenate([faces, [[v0, v0 + 1, v0 + 2], [v0 + 3, v0 + 4, v0]]])
    corners = vertices[faces].astype(np.float32).astype(np.float64)
    points = np.concatenate([vertices, corners.mean(axis=1), (corners[:, 0] + corners[:, 1]) / 2,
                             rng.normal(size=(200, 3)) * 0.7]).astype(np.float32)
    bvh = TriangleBVH.build(vertices, faces, leaf_size=4)
    found, oracle = bvh.closest_points(points), bvh.brute_force(points)
    np.testing.assert_allclose(found["dist2"], oracle["dist2"], rtol=REL_TOL, atol=1e-12)
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


def test_disc_lower_bound_never_exceeds_the_distance(ti_cpu):
    """The disc bound of a triangle, as the query evaluates it in float32, stays at or below the
    float64 distance, for points on the triangle (distance ~0: any rounding would overshoot),
    near its plane and far, on well-shaped triangles and on slivers whose normal is inaccurate."""
    rng = np.random.default_rng(4)
    n = 3000
    a, b = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    c = rng.normal(size=(n, 3))
    c[::3] = a[::3] + rng.uniform(0, 2, (n // 3, 1)) * (b[::3] - a[::3]) + 1e-6 * rng.normal(size=(n // 3, 3))
    corners = np.stack([a, b, c], axis=1).astype(np.float32)
    weights = rng.dirichlet(np.ones(3), n)
    on = np.einsum("ij,ijk->ik", weights.astype(np.float32), corners)  # on the triangle, in float32
    points = np.concatenate([on, on + 1e-3 * rng.normal(size=(n, 3)), on + rng.normal(size=(n, 3))]).astype(np.float32)
    tri = np.concatenate([corners] * 3)

    from tests.disc_bound import disc_lower_bounds

    found = np.zeros(len(points), np.float32)
    disc_lower_bounds(points, tri, found)
    t64 = tri.astype(np.float64)
    exact = np.array([numpy_dist2(points[i].astype(np.float64), t64[i:i + 1, 0], t64[i:i + 1, 1], t64[i:i + 1, 2])[0]
                      for i in range(len(points))])
    assert (found <= exact).all(), np.max(found - exact)
