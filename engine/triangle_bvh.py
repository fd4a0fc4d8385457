"""Host glue for the triangle BVH: build the tree order, own its fields, launch refit and queries.

API (device math is in `engine.kernels.bvh_query`; the tree layout is described there):

    bvh = TriangleBVH.build(vertices, faces)            # numpy (V, 3) float, (F, 3) int
    bvh = TriangleBVH(vertices_field, faces_field)      # existing fields (vec3 f32 (V,), vec3 i32 (F,))
    bvh.refit()                                         # one device launch: boxes from current vertices
    bvh.query(points, out_face, out_bary, out_point, out_dist2, n)   # fields; first n points
    bvh.closest_points(points) -> {"face", "bary", "point", "dist2"}  # numpy in, numpy out
    bvh.brute_force(points)    -> the same dict, by testing every face (the oracle)
    bvh.counters() -> {"misses", "overflows"}; bvh.reset_counters(); bvh.destroy()

Build: object-median split on the longest centroid axis, level by level over every
node at once (vectorised numpy), giving a complete tree with every leaf at one depth
and between leaf_size/2 and leaf_size faces per leaf: no child pointers, and a depth
bound that makes stack overflow impossible (see `engine.kernels.bvh_query`). The tree's
triangle order is fixed at build; `refit()` recomputes the boxes on the device after
vertices move (call it every iteration, under `tape.pause()` inside a tape: refit and
queries are untaped launches); `rebuild()` re-sorts on the host if the mesh has
deformed so much that boxes overlap badly (slower queries, never wrong answers).

`query` fields: points vec3 f32 (>= n,), out_face i32, out_bary vec3 f32, out_point vec3
f32, out_dist2 f32 (each >= n,). `out_bary` weights the face's corners in `faces` order.
A point with no answer (NaN) gets face -1, dist2 inf, and counts as a miss.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.errors import UserError
from engine.fields import FieldGroup
from engine.kernels import bvh_query as kernels
from engine.launch import launch

DEFAULT_LEAF_SIZE = 16  # most faces per leaf; chosen by measurement (docs/RESULTS.md)


def tree_depth(n_faces: int, leaf_size: int) -> int:
    """Levels below the root so that every leaf holds at most leaf_size faces (and at least 1)."""
    depth = 0
    while -(-n_faces // (1 << depth)) > leaf_size:
        depth += 1
    return depth


def median_split_order(centroids: np.ndarray, depth: int) -> np.ndarray:
    """Face order for a complete tree of `depth` levels: each node's range is sorted along its
    longest centroid axis and split at floor((2j+1) n / 2^(d+1)), all nodes of a level at once.

    One argsort per level: the key is the node's index plus the centroid's position along
    that node's axis scaled into [0, 0.5], so the sort groups by node and orders within it.
    """
    n = len(centroids)
    order = np.arange(n)
    flat_rows = np.arange(n) * 3
    for level in range(depth):
        nodes = np.arange(1 << level)
        starts = (np.arange((1 << level) + 1, dtype=np.int64) * n) >> level
        segment = np.repeat(nodes, np.diff(starts))
        c = np.take(centroids, order, axis=0)  # np.take: ~10x faster than fancy indexing here
        lo = np.minimum.reduceat(c, starts[:-1], axis=0)
        extent = np.maximum.reduceat(c, starts[:-1], axis=0) - lo
        axis = np.argmax(extent, axis=1)
        node_lo, node_extent = lo[nodes, axis], extent[nodes, axis]
        scale = 0.5 / np.where(node_extent > 0, node_extent, 1.0)
        along = np.take(c.reshape(-1), flat_rows + np.take(axis, segment))
        key = segment + (along - np.take(node_lo, segment)) * np.take(scale, segment)
        order = np.take(order, np.argsort(key, kind="stable"))  # stable: ties keep their order, reproducible
    return order


def morton_order(points: np.ndarray, bits: int = 10) -> np.ndarray:
    """The permutation that puts `points` (N, 3) in Morton (Z-curve) order over their bounding box.

    Queries issued in this order descend mostly the same BVH nodes one after another, so
    the boxes stay in cache: Chamfer target samples sorted this way make a spot fit
    14-18 % faster per iteration on the cpu (docs/RESULTS.md). Stable, so equal codes keep
    their input order. Coordinate k's bit b lands at bit 3b + k of the code.
    """
    points = np.asarray(points, dtype=np.float64)
    lo, hi = points.min(axis=0), points.max(axis=0)
    cells = (1 << bits) - 1
    grid = np.clip((points - lo) / np.where(hi > lo, hi - lo, 1.0) * cells, 0, cells).astype(np.uint64)
    code = np.zeros(len(points), dtype=np.uint64)
    for bit in range(bits):
        for axis in range(3):
            code |= ((grid[:, axis] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(3 * bit + axis)
    return np.argsort(code, kind="stable")


def leaf_starts(n_faces: int, depth: int) -> np.ndarray:
    """First slot of each leaf, plus n_faces at the end: floor(k n / 2^depth)."""
    return ((np.arange((1 << depth) + 1, dtype=np.int64) * n_faces) >> depth).astype(np.int32)


def _check_mesh(vertices: np.ndarray, faces: np.ndarray) -> None:
    if vertices.ndim != 2 or vertices.shape[1] != 3 or len(vertices) == 0:
        raise UserError(f"BVH vertices must be a non-empty (V, 3) array, got shape {vertices.shape}")
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise UserError(f"BVH faces must be a non-empty (F, 3) array, got shape {faces.shape}")
    if not np.issubdtype(faces.dtype, np.integer):
        raise UserError(f"BVH faces must be integer indices, got {faces.dtype}")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise UserError(f"BVH faces index vertices outside 0..{len(vertices) - 1}")
    if not np.isfinite(vertices).all():
        raise UserError("BVH vertices contain NaN or infinite coordinates")


def _check_points(points: np.ndarray) -> np.ndarray:
    points = np.asarray(points)
    if points.ndim != 2 or points.shape[1] != 3 or len(points) == 0:
        raise UserError(f"query points must be a non-empty (N, 3) array, got shape {points.shape}")
    return np.ascontiguousarray(points, dtype=np.float32)


class QueryBuffers:
    """Fields for up to `capacity` queries: the inputs and outputs of `TriangleBVH.query`."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.group = FieldGroup()
        self.points = self.group.vector(3, ti.f32, (capacity,))
        self.face = self.group.field(ti.i32, (capacity,))
        self.bary = self.group.vector(3, ti.f32, (capacity,))
        self.point = self.group.vector(3, ti.f32, (capacity,))
        self.dist2 = self.group.field(ti.f32, (capacity,))
        self.group.finalize()

    def load(self, points: np.ndarray) -> int:
        padded = np.zeros((self.capacity, 3), np.float32)
        padded[: len(points)] = points
        self.points.from_numpy(padded)
        return len(points)

    def results(self, n: int) -> dict[str, np.ndarray]:
        return {"face": self.face.to_numpy()[:n], "bary": self.bary.to_numpy()[:n],
                "point": self.point.to_numpy()[:n], "dist2": self.dist2.to_numpy()[:n]}


class TriangleBVH:
    """A BVH over the triangles in `faces_field` with corners in `vertices_field` (see module docstring).

    Args:
        vertices_field: Taichi vector field, 3 x f32, shape (V,): the corners (read again by `refit`).
        faces_field: Taichi vector field, 3 x i32, shape (F,): corner indices into `vertices_field`.
        leaf_size: most faces per leaf, 2..64.
        stack_size: the query's per-thread stack, 1..STACK_SIZE (below the depth only in tests).

    Raises:
        UserError: an empty mesh, a face index out of range, non-finite corners, a leaf or stack
            size out of range, or a tree deeper than the query stack.
        BackendNotStarted: no backend runs in this process (`engine.backend.init` first).

    Example:
        >>> import numpy as np
        >>> from engine import backend
        >>> from engine.meshgen import icosphere
        >>> _ = backend.init("cpu")
        >>> bvh = TriangleBVH.build(*icosphere(2))         # 320 faces of the unit sphere
        >>> hits = bvh.closest_points(np.array([[0.0, 0.0, 2.0], [0.0, 0.0, 0.5]]))
        >>> [round(float(d), 3) for d in np.sqrt(hits["dist2"])]  # a vertex at (0, 0, 1); inside, a facet below the sphere
        [1.0, 0.492]
        >>> bool((hits["dist2"] == bvh.brute_force([[0.0, 0.0, 2.0], [0.0, 0.0, 0.5]])["dist2"]).all())
        True
    """

    def __init__(self, vertices_field, faces_field, leaf_size: int = DEFAULT_LEAF_SIZE,
                 stack_size: int = kernels.STACK_SIZE) -> None:
        if not 2 <= leaf_size <= 64:
            raise UserError(f"BVH leaf size must be in 2..64, got {leaf_size}")
        self.vertices, self.faces = vertices_field, faces_field
        self.leaf_size = leaf_size
        faces_np = faces_field.to_numpy()
        vertices_np = vertices_field.to_numpy()
        _check_mesh(vertices_np, faces_np)
        self.n_faces = len(faces_np)
        self.depth = tree_depth(self.n_faces, leaf_size)
        if not 1 <= stack_size <= kernels.STACK_SIZE:
            raise UserError(f"BVH query stack size must be in 1..{kernels.STACK_SIZE}, got {stack_size}")
        self.stack_size = stack_size  # below depth only in tests of the overflow guard
        if self.depth > kernels.STACK_SIZE:
            raise UserError(f"mesh of {self.n_faces} faces needs a tree deeper than the query stack "
                            f"({kernels.STACK_SIZE}); raise the leaf size")
        self.n_nodes = (1 << (self.depth + 1)) - 1
        self.group = FieldGroup()
        self.order = self.group.field(ti.i32, (self.n_faces,))
        self.leaf_start = self.group.field(ti.i32, ((1 << self.depth) + 1,))
        self.tris = self.group.vector(9, ti.f32, (self.n_faces,))
        self.spheres = self.group.vector(4, ti.f32, (self.n_faces,))
        self.boxes = self.group.vector(6, ti.f32, (self.n_nodes,))
        self.counter = self.group.field(ti.i32, (2,))
        self.group.finalize()
        self.leaf_start.from_numpy(leaf_starts(self.n_faces, self.depth))
        self._owned: FieldGroup | None = None  # the mesh fields' group when `build` made them
        self._buffers: QueryBuffers | None = None
        self._sort(vertices_np, faces_np)

    @classmethod
    def build(cls, vertices: np.ndarray, faces: np.ndarray, leaf_size: int = DEFAULT_LEAF_SIZE,
              stack_size: int = kernels.STACK_SIZE) -> "TriangleBVH":
        """A BVH that owns float32/int32 copies of `vertices` (V, 3) float and `faces` (F, 3) int.

        Raises what the constructor raises (the mesh is checked before anything is allocated)."""
        vertices, faces = np.asarray(vertices), np.asarray(faces)
        _check_mesh(vertices, faces)
        group = FieldGroup()
        vertices_field = group.vector(3, ti.f32, (len(vertices),))
        faces_field = group.vector(3, ti.i32, (len(faces),))
        group.finalize()
        vertices_field.from_numpy(vertices.astype(np.float32))
        faces_field.from_numpy(faces.astype(np.int32))
        bvh = cls(vertices_field, faces_field, leaf_size, stack_size)
        bvh._owned = group
        return bvh

    def _sort(self, vertices: np.ndarray, faces: np.ndarray) -> None:
        centroids = vertices.astype(np.float64)[faces].mean(axis=1)
        self.order.from_numpy(median_split_order(centroids, self.depth).astype(np.int32))
        self.refit()

    def rebuild(self) -> None:
        """Re-sort the tree on the host from the current vertices, then refit."""
        self._sort(self.vertices.to_numpy(), self.faces.to_numpy())

    def refit(self) -> None:
        """Recompute every box from the current vertices on the device (one launch, deterministic).

        Call after `vertices_field` changed (every fit iteration); the face order stays that of the
        build, so a mesh that deformed far gets slower queries (never wrong ones): then `rebuild()`."""
        launch(kernels.refit, self.vertices, self.faces, self.order, self.leaf_start, self.tris, self.spheres,
               self.boxes, self.depth)

    def query(self, points, out_face, out_bary, out_point, out_dist2, n: int) -> None:
        """Closest point on the mesh for points[0:n], written to the out_* fields (one launch, no host copy).

        Args:
            points: vec3 f32 field (>= n,). out_face: i32 field, the face index (-1 for a NaN point).
            out_bary: vec3 f32, weights of the face's corners in `faces` order. out_point: vec3 f32,
            the closest point. out_dist2: f32, its squared distance (inf for a NaN point). n: points used.
        Misses and stack overflows are counted in `counters()`; untaped (call under `tape.pause()`)."""
        launch(kernels.closest_point_query, points, n, self.tris, self.spheres, self.order, self.leaf_start,
               self.boxes, self.depth, out_face, out_bary, out_point, out_dist2, self.counter, self.stack_size)

    def _buffers_for(self, n: int) -> QueryBuffers:
        if self._buffers is None or self._buffers.capacity < n:
            if self._buffers is not None:
                self._buffers.group.destroy()
            self._buffers = QueryBuffers(max(1024, 1 << (n - 1).bit_length()))
        return self._buffers

    def closest_points(self, points: np.ndarray) -> dict[str, np.ndarray]:
        """Numpy convenience for `query`.

        Args: points: (N, 3) float array (any float dtype; queried in float32).
        Returns: {"face": (N,) int32, "bary": (N, 3) float32, "point": (N, 3) float32, "dist2": (N,) float32}.
        Raises: UserError for points that are not (N, 3); RuntimeError if the stack guard ever fired."""
        points = _check_points(points)
        buffers = self._buffers_for(len(points))
        n = buffers.load(points)
        self.query(buffers.points, buffers.face, buffers.bary, buffers.point, buffers.dist2, n)
        self.check_overflow()
        return buffers.results(n)

    def brute_force(self, points: np.ndarray) -> dict[str, np.ndarray]:
        """The oracle: the same answers as `closest_points`, by testing every face for every point."""
        points = _check_points(points)
        buffers = self._buffers_for(len(points))
        n = buffers.load(points)
        launch(kernels.brute_force_closest, buffers.points, n, self.vertices, self.faces,
               buffers.face, buffers.bary, buffers.point, buffers.dist2)
        return buffers.results(n)

    def counters(self) -> dict[str, int]:
        """Queries without an answer and stack pushes that did not fit, since the last reset."""
        values = self.counter.to_numpy()
        return {"misses": int(values[kernels.MISSES]), "overflows": int(values[kernels.OVERFLOWS])}

    def reset_counters(self) -> None:
        self.counter.fill(0)

    def check_overflow(self) -> None:
        """Raise if any query ran out of stack (impossible by the depth bound; checked anyway)."""
        overflows = self.counters()["overflows"]
        if overflows:
            raise RuntimeError(f"BVH query stack overflowed {overflows} times (depth {self.depth}, "
                               f"stack {self.stack_size}): results are incomplete")

    def destroy(self) -> None:
        for group in (self._buffers.group if self._buffers else None, self.group, self._owned):
            if group is not None:
                group.destroy()
        self._buffers = self._owned = None


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
    """Parity computation: BVH answers and the brute-force oracle's for the same points."""
    bvh = TriangleBVH.build(vertices, faces)
    found = bvh.closest_points(points)
    oracle = bvh.brute_force(points)
    counters = bvh.counters()
    bvh.destroy()
    return {"face": found["face"], "bary": found["bary"], "point": found["point"], "dist2": found["dist2"],
            "brute_dist2": oracle["dist2"], "misses": np.array(counters["misses"]),
            "overflows": np.array(counters["overflows"])}


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
