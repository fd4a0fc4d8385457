"""Host glue for the triangle BVH: build it, own its fields, launch refit and queries.

API (device math is in `engine.kernels.bvh_query`, where the tree layout and its bounds are described):

    bvh = TriangleBVH.build(vertices, faces)            # numpy (V, 3) float, (F, 3) int
    bvh = TriangleBVH(vertices_field, faces_field)      # existing fields (vec3 f32 (V,), vec3 i32 (F,))
    bvh.refit()                                         # on the device: bounds from the current vertices
    bvh.rebuild()                                       # on the device: re-sort, then refit
    bvh.query(points, out_face, out_bary, out_point, out_dist2, n)   # fields or ndarrays; first n points
    bvh.query(..., warm=True)                           # out_face's earlier answers seed the searches
    bvh.query(..., resort=False)                        # a sorted batch keeps its last Morton order
    bvh.closest_points(points) -> {"face", "bary", "point", "dist2"}  # numpy in, numpy out
    bvh.brute_force(points)    -> the same dict, by testing every face (the oracle)
    bvh.counters() -> {"misses", "overflows"}; bvh.reset_counters(); bvh.destroy()

Build (on the device, `rebuild`): an implicit complete 4-ary tree of `depth` levels, its
4^depth leaves holding equal runs of the face order (between 1 and leaf_size faces each); the
order comes from a median split along the longest centroid axis, one parallel launch per
binary level (quickselect per node, O(F) per level), so a build never leaves the device and
costs no host sort. The order is fixed until the next `rebuild`; `refit()` recomputes every
bound after vertices move (call it every iteration, under `tape.pause()` inside a tape:
refit and queries are untaped launches). Re-sort when the mesh has deformed so much that
bounds overlap badly (slower queries, never wrong answers).

Queries: `query` searches a batch of SORT_MIN or more points in Morton order (a bucket sort on
the device, `engine.kernels.morton`), unless the caller says they are in a spatial order already
(`presorted`), so consecutive searches share the tree's cache lines, and writes each answer to
its point's own index. With `warm`, each search first tests the face `out_face` holds for its
point (the previous answer, in an iterative fit): a tight bound from the start, so fewer nodes
are pushed; the distances found are the same. `closest_points` takes numpy (on the CPU the
kernel reads and writes the arrays in place: one launch for one point). `query` on ndarrays is
one launch (searched and written in place); on fields the points are gathered into the tree's
arrays and the answers scattered back (a launch each).

`query` buffers: points vec3 f32 (>= n,), out_face i32, out_bary vec3 f32, out_point vec3
f32, out_dist2 f32 (each >= n,). `out_bary` weights the face's corners in `faces` order.
A point with no answer (NaN) gets face -1, dist2 inf, and counts as a miss.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine import backend, cpu_pool
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.kernels import bvh_query as kernels
from engine.kernels import morton
from engine.kernels.chamfer_terms import exclusive_scan
from engine.dispatch import BoundLaunch, bind
from engine.launch import launch

DEFAULT_LEAF_SIZE = 24  # most faces per leaf; chosen by measurement (docs/RESULTS.md)
MAX_FACES = 1 << 24  # face indices above this lose precision in float32 leaf bookkeeping
SORT_MIN = 2048  # `query` orders batches of this many points or more (docs/RESULTS.md, issue 12)
QUERY_BLOCK = 4  # consecutive points (in search order) an iteration of the query loop takes on the CPU
SERIAL_MAX = 128  # batches of at most this many points are searched on the launching thread (RESULTS, issue 12)
PARALLEL_NODES = 1024  # refit levels of fewer nodes run serially, in one launch
REFIT_GROUP_LEVELS = 3  # the refit's parallel loop takes 4^3 leaves and their three inner levels an iteration
PARALLEL_VERTICES = 1 << 16  # the vertex copy of smaller meshes runs serially
SERIAL_COPY_MAX = 1024  # `query` gathers and scatters batches of at most this many points serially (RESULTS)


_NUMBERS = (int, float)  # run-time scalar arguments of the tree's kernels (bools are template flags)


def tree_depth(n_faces: int, leaf_size: int) -> int:
    """Levels of the 4-ary tree below the root so that every leaf holds at most leaf_size faces.

    With leaf_size >= 4 no leaf is empty: the level above had more than leaf_size faces per
    node, so each of its nodes' four leaves gets more than leaf_size / 4 >= 1."""
    depth = 0
    while -(-n_faces // (1 << (2 * depth))) > leaf_size:
        depth += 1
    return depth


def leaf_starts(n_faces: int, depth: int) -> np.ndarray:
    """First face (in tree order) of each of the 4^depth leaves, plus n_faces: floor(k n / 4^depth)."""
    return ((np.arange((1 << (2 * depth)) + 1, dtype=np.int64) * n_faces) >> (2 * depth)).astype(np.int32)


def _part1by2(x: np.ndarray) -> np.ndarray:
    """Spread the low 21 bits of x (uint64) to every third bit: bit b goes to bit 3b."""
    x = x & np.uint64(0x1FFFFF)
    for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                        (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
        x = (x | (x << np.uint64(shift))) & np.uint64(mask)
    return x


def morton_order(points: np.ndarray, bits: int = 10) -> np.ndarray:
    """The permutation that puts `points` (N, 3) in Morton (Z-curve) order over their bounding box.

    Queries issued in this order descend mostly the same BVH nodes one after another, so
    the tree stays in cache: Chamfer target samples sorted this way make a spot fit
    14-18 % faster per iteration on the cpu (docs/RESULTS.md). Stable, so equal codes keep
    their input order. Coordinate k's bit b (of `bits`, at most 21) lands at bit 3b + k of the code.
    """
    points = np.asarray(points, np.float64)
    lo, hi = points.min(axis=0), points.max(axis=0)
    cells = (1 << bits) - 1
    grid = np.clip((points - lo) / np.where(hi > lo, hi - lo, 1.0) * cells, 0, cells).astype(np.uint64)
    code = _part1by2(grid[:, 0]) | (_part1by2(grid[:, 1]) << np.uint64(1)) | (_part1by2(grid[:, 2]) << np.uint64(2))
    return np.argsort(code, kind="stable")


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
    return points


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


class _Batch:
    """The query kernel's arrays for up to `capacity` points: ndarrays on the device for `query`,
    numpy for `closest_points` (read and written in place on the CPU). Kept per capacity, so
    repeated calls reuse one native binding (engine.dispatch keys bindings on the arrays)."""

    def __init__(self, capacity: int, host: bool) -> None:
        self.capacity = capacity
        if host:
            new = lambda width, dtype: np.zeros((capacity, width) if width > 1 else capacity, dtype)  # noqa: E731
        else:
            new = lambda width, dtype: ti.ndarray(  # noqa: E731
                ti.types.vector(width, ti.f32) if width > 1 else ti.i32 if dtype == np.int32 else ti.f32, (capacity,))
        self.points, self.bary, self.point = new(3, np.float32), new(3, np.float32), new(3, np.float32)
        self.face, self.dist2 = new(1, np.int32), new(1, np.float32)
        self.perm = ti.ndarray(ti.i32, (capacity,))
        self.outs = (self.face, self.bary, self.point, self.dist2)  # the query kernel's outputs, in its order
        self.counts = np.zeros(2, np.int32)  # misses and overflows of one `closest_points` call
        self.sorted_for: tuple[int, int] | None = None  # (id of the points, n) `perm` was last sorted for
        self.searches: dict[tuple, BoundLaunch] = {}  # `closest_points`' query bindings on these arrays (`_search`)

    def results(self, n: int) -> dict[str, np.ndarray]:
        """Copies of a host batch's first n answers (the next call writes over the batch)."""
        return {"face": self.face[:n].copy(), "bary": self.bary[:n].copy(), "point": self.point[:n].copy(),
                "dist2": self.dist2[:n].copy()}


def _query_shape(n: int, serial: bool) -> tuple[int, int, int, int]:
    """(block, span, chunk, threads) of the query loop over n points: on the CPU blocks of QUERY_BLOCK
    points spread over the pool's threads (one thread when `serial`); elsewhere a point an iteration."""
    if not cpu_pool.on_cpu():
        return 1, n, n, 1
    blocks = -(-n // QUERY_BLOCK)
    return (QUERY_BLOCK, blocks, blocks, 1) if serial else (QUERY_BLOCK, *cpu_pool.loop_spread(blocks))


class _Ordering:
    """The device scratch of the Morton bucket sort (`engine.kernels.morton`): fixed sizes, one
    per Taichi program, so its kernels compile once."""

    _current: tuple[object, "_Ordering"] | None = None  # (the program, compared by identity; its scratch)

    def __init__(self) -> None:
        self.group = FieldGroup()
        self.boxes = self.group.vector(6, ti.f32, (morton.BOX_BLOCKS,))
        self.counts = self.group.field(ti.i32, (morton.BUCKETS,))
        self.start = self.group.field(ti.i32, (morton.BUCKETS + 1,))
        self.cursor = self.group.field(ti.i32, (morton.BUCKETS,))
        self.block_total = self.group.field(ti.i32, (-(-morton.BUCKETS // 64),))
        self.group.finalize()

    @classmethod
    def get(cls) -> "_Ordering":
        program = backend.taichi_program()  # a re-initialised Taichi has freed the old fields
        if cls._current is None or cls._current[0] is not program:
            cls._current = (program, cls())
        return cls._current[1]

    def sort(self, points, n: int, perm, run) -> None:
        """perm[:n]: the indices of points[:n] in Morton bucket order (see engine.kernels.morton);
        `run(kernel, *args)` launches (the tree's own, which holds the bindings of its arrays)."""
        run(morton.block_boxes, points, n, self.boxes, self.counts)
        run(morton.merge_boxes, self.boxes)
        run(morton.count_buckets, points, n, self.boxes, self.counts)
        run(exclusive_scan, self.counts, self.start, self.cursor, self.block_total)
        run(morton.scatter, points, n, self.boxes, self.cursor, perm)


class TriangleBVH:
    """A BVH over the triangles in `faces_field` with corners in `vertices_field` (see module docstring).

    Args:
        vertices_field: Taichi vector field, 3 x f32, shape (V,): the corners (read again by `refit`).
        faces_field: Taichi vector field, 3 x i32, shape (F,): corner indices into `vertices_field`.
        leaf_size: most faces per leaf, 4..64.
        stack_size: the query's per-thread stack, 1..STACK_SIZE (below 3 x depth only in tests).

    Raises:
        UserError: an empty mesh, a face index out of range, non-finite corners, more than
            MAX_FACES faces, a leaf or stack size out of range, or a tree deeper than the query stack.
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
        self._allocate(vertices_field.to_numpy(), faces_field.to_numpy(), leaf_size, stack_size)
        self.vertices, self.faces = vertices_field, faces_field
        self.rebuild()

    @classmethod
    def build(cls, vertices: np.ndarray, faces: np.ndarray, leaf_size: int = DEFAULT_LEAF_SIZE,
              stack_size: int = kernels.STACK_SIZE) -> "TriangleBVH":
        """A BVH that owns float32/int32 copies of `vertices` (V, 3) float and `faces` (F, 3) int:
        `bvh.vertices` and `bvh.faces` are then its own ndarrays (move the mesh with
        `bvh.vertices.from_numpy`, then `refit()`). No fields: every Taichi kernel compiles once per
        field it is given (Taichi's own transfers too), and freeing a field group drops the kernels
        given its fields (`engine.fields.FieldGroup.destroy`), so a tree on fields of its own cost
        ~0.2-0.5 s to make and free even for a small mesh (docs/RESULTS.md).

        Raises what the constructor raises (the mesh is checked before anything is allocated)."""
        vertices, faces = np.asarray(vertices), np.asarray(faces)
        bvh = cls.__new__(cls)
        bvh._allocate(vertices, faces, leaf_size, stack_size)
        bvh.mesh_vertices.from_numpy(vertices.astype(np.float32))
        bvh.vertices, bvh.faces = bvh.mesh_vertices, bvh.mesh_faces
        bvh.rebuild()
        return bvh

    def _allocate(self, vertices: np.ndarray, faces: np.ndarray, leaf_size: int, stack_size: int) -> None:
        """Check the mesh and the sizes, shape the tree and allocate its arrays (the faces copied in)."""
        backend.require()  # Taichi's own failure without a backend is a deep AttributeError
        if not 4 <= leaf_size <= 64:  # at least 4: no leaf is empty (see tree_depth)
            raise UserError(f"BVH leaf size must be in 4..64, got {leaf_size}")
        _check_mesh(vertices, faces)
        self.leaf_size = leaf_size
        self.n_faces = len(faces)
        if self.n_faces > MAX_FACES:
            raise UserError(f"BVH of {self.n_faces:,} faces: at most {MAX_FACES:,} are supported")
        self.depth = tree_depth(self.n_faces, leaf_size)
        if not 1 <= stack_size <= kernels.STACK_SIZE:
            raise UserError(f"BVH query stack size must be in 1..{kernels.STACK_SIZE}, got {stack_size}")
        self.stack_size = stack_size  # below 3 depth only in tests of the overflow guard
        if 3 * self.depth > kernels.STACK_SIZE:
            raise UserError(f"mesh of {self.n_faces} faces needs a tree deeper than the query stack "
                            f"({kernels.STACK_SIZE} entries); raise the leaf size")
        self.n_leaves = 1 << (2 * self.depth)
        self.n_inner = (self.n_leaves - 1) // 3
        starts = leaf_starts(self.n_faces, self.depth)
        self.width = -(-int(np.diff(starts).max()) // 4) * 4  # slots per leaf: whole packets of four
        # the refit's groups of leaves, their spread over the threads and that of each of the build's split
        # levels, fixed for the tree's life (the backend cannot change under it): derived once, not on every
        # refit or rebuild (~4.5 us of Python a call). A GPU wants a thread per leaf: groups would leave most
        # of it idle.
        self._refit_groups = min(REFIT_GROUP_LEVELS, self.depth) if cpu_pool.on_cpu() else 0
        self._refit_spread = cpu_pool.loop_spread(self.n_leaves >> (2 * self._refit_groups))
        self._split_spreads = [cpu_pool.loop_spread(1 << level) for level in range(2 * self.depth)]
        # the tree's own arrays are ndarrays: every kernel compiles once per process, whatever the mesh size
        vector = lambda width, shape: ti.ndarray(ti.types.vector(width, ti.f32), shape)  # noqa: E731
        self.mesh_vertices = vector(3, (len(vertices),))  # a vertex field's copy, or `build`'s vertices
        self._serial_copy = len(vertices) < PARALLEL_VERTICES
        self.mesh_faces = ti.ndarray(ti.types.vector(3, ti.i32), (self.n_faces,))
        self.mesh_faces.from_numpy(faces.astype(np.int32))
        self.tree_faces = ti.ndarray(ti.types.vector(3, ti.i32), (self.n_faces,))  # the faces in tree order
        self.order = ti.ndarray(ti.i32, (self.n_faces,))
        self.face_slot = ti.ndarray(ti.i32, (self.n_faces,))  # face -> its slot, for warm starts
        self.centroids = vector(3, (self.n_faces,))  # build scratch, in tree order
        self.leaf_start = ti.ndarray(ti.i32, (self.n_leaves + 1,))
        self.corner_packets = vector(kernels.CORNER_PACKET, (self.n_leaves * self.width // 4,))
        self.bound_packets = vector(kernels.BOUND_PACKET, (self.n_leaves * self.width // 4,))
        self.node_bound = vector(kernels.BOUND_WIDTH, (self.n_inner + self.n_leaves,))
        self.nodes = vector(kernels.NODE_WIDTH, (max(self.n_inner, 1),))
        self.counter = ti.ndarray(ti.i32, (2,))
        self.counter.fill(0)
        self.leaf_start.from_numpy(starts)
        self._batches: dict[tuple[int, bool], _Batch] = {}
        self._host_last: tuple[int, _Batch | None] = (0, None)  # `closest_points`' last size and its batch
        self._bindings: dict[tuple, tuple[BoundLaunch, list[int]]] = {}
        self._searches: dict[tuple, BoundLaunch] = {}  # the query kernel's bindings (`_search`)
        self._host_counts = np.zeros(2, np.int64)  # misses and overflows of `closest_points` calls

    def _launch(self, kernel, *args) -> None:
        """Launch `kernel` through a binding this tree keeps (engine.dispatch.bind), one per kernel
        and set of array, field and flag arguments; a later call rewrites the numbers that changed.
        The tree's arrays are then referenced only here and go with the tree (a binding in
        dispatch's shared cache would keep them alive), and a launch costs ~1 us of Python.
        Untaped, like all tree work."""
        key = (kernel, *(arg if arg.__class__ is bool else id(arg) for arg in args if arg.__class__ not in _NUMBERS))
        entry = self._bindings.get(key)
        if entry is None:
            numbers = [position for position, arg in enumerate(args) if arg.__class__ in _NUMBERS]
            entry = self._bindings[key] = (bind(kernel, *args), numbers)
        bound, numbers = entry
        for position in numbers:
            if args[position] != bound.args[position]:
                bound.set(position, args[position])
        bound()

    def _copy_vertices(self) -> None:
        """The vertex field's current corners into the tree's array (a `build` tree's are that array)."""
        if self.vertices is not self.mesh_vertices:
            self._launch(kernels.copy_vertices, self.vertices, self.mesh_vertices, self._serial_copy)

    def rebuild(self) -> None:
        """Re-sort the tree from the current vertices (median splits on the device), then refit."""
        self._copy_vertices()
        self._launch(kernels.face_centroids, self.mesh_vertices, self.mesh_faces, self.order, self.centroids)
        for level, spread in enumerate(self._split_spreads):
            self._launch(kernels.split_level, self.order, self.centroids, self.leaf_start, level, 2 * self.depth,
                         *spread)
        self._launch(kernels.sort_faces, self.mesh_faces, self.order, self.tree_faces)
        self._launch(kernels.slot_of_faces, self.order, self.leaf_start, self.width, self.face_slot)
        self.refit()

    def refit(self) -> None:
        """Recompute every bound from the current vertices on the device (deterministic): the vertex
        copy, then the leaves in groups of REFIT_GROUP_LEVELS levels on the CPU (each group's subtree
        in one thread; on a GPU a leaf a thread) with the inner levels too small to run in parallel in
        the same launch (on the CPU a tree of up to 4^8 leaves: two launches in all), else one launch
        per large level above the groups bottom-up, and the small levels above in one.

        Call after `vertices_field` changed (every fit iteration); the face order stays that of the
        build, so a mesh that deformed far gets slower queries (never wrong ones): then `rebuild()`."""
        self._copy_vertices()
        level_start = lambda level: ((1 << (2 * level)) - 1) // 3  # noqa: E731
        level = self.depth - 1 - self._refit_groups  # the deepest inner level the groups leave
        large = lambda level: level >= 0 and level_start(level + 1) - level_start(level) >= PARALLEL_NODES  # noqa: E731
        self._launch(kernels.refit_leaves, self.mesh_vertices, self.tree_faces, self.leaf_start, self.corner_packets,
                     self.bound_packets, self.node_bound, self.nodes, self.n_inner, self.width, self._refit_groups,
                     *self._refit_spread, 0 if large(level) else level_start(level + 1))
        if large(level):  # else the leaves' launch did every inner node
            while large(level):
                self._launch(kernels.refit_level, self.nodes, self.node_bound, level_start(level),
                             level_start(level + 1), False)
                level -= 1
            if level >= 0:  # the levels above, serially in one launch
                self._launch(kernels.refit_level, self.nodes, self.node_bound, 0, level_start(level + 1), True)

    def query(self, points, out_face, out_bary, out_point, out_dist2, n: int, presorted: bool = False,
              warm: bool = False, resort: bool = True) -> None:
        """Closest point on the mesh for points[0:n], written to the out_* buffers (no host copy; see module docstring).

        Args:
            points: vec3 f32 field or ndarray (>= n,). out_face: i32, the face index (-1 for a NaN point).
            out_bary: vec3 f32, weights of the face's corners in `faces` order. out_point: vec3 f32,
            the closest point. out_dist2: f32, its squared distance (inf for a NaN point). n: points used.
            presorted: the points are already in a spatial order (e.g. `morton_order`): not sorted again.
            warm: out_face[:n] holds an earlier answer for each point (any face index; one outside the
            mesh, e.g. -1, is ignored): each search tests that face first.
            resort: with False, a batch that is sorted (SORT_MIN points or more, not `presorted`) is searched in the
            order of the last sort of these points instead of a new one (five launches fewer; an iterative fit that
            moves its points a little each time sorts again when it rebuilds its tree). The answers are the same.
        The searches read and write ndarrays in place (one launch for the search); fields are first gathered into
        the tree's own arrays and the answers scattered back to them (a launch each). The points are searched in
        Morton order from SORT_MIN points on, unless `presorted`.
        Misses and stack overflows are counted in `counters()`; untaped (call under `tape.pause()`)."""
        batch = self._batch(n, host=False)
        serial = n <= SERIAL_COPY_MAX
        if not isinstance(points, ti.Ndarray):
            self._launch(kernels.gather_points, points, n, batch.points, serial)
            points = batch.points
        outs = (out_face, out_bary, out_point, out_dist2)
        in_place = all(isinstance(out, ti.Ndarray) for out in outs)
        if not in_place:
            if warm:
                self._launch(kernels.gather_faces, out_face, n, batch.face, serial)
            outs = batch.outs
        sort = not presorted and n >= SORT_MIN
        if sort and (resort or batch.sorted_for != (id(points), n)):
            _Ordering.get().sort(points, n, batch.perm, self._launch)
            batch.sorted_for = (id(points), n)
        self._search(self._searches, (id(points), *map(id, outs), id(batch.perm), sort, warm), points, n, batch.perm,
                     sort, outs, self.counter, warm)
        if not in_place:
            self._launch(kernels.scatter_results, *outs, n, out_face, out_bary, out_point, out_dist2, serial)

    def closest_points(self, points: np.ndarray) -> dict[str, np.ndarray]:
        """Numpy convenience for `query` (on the CPU the kernel reads and writes numpy in place).

        Args: points: (N, 3) float array (any float dtype; queried in float32).
        Returns: {"face": (N,) int32, "bary": (N, 3) float32, "point": (N, 3) float32, "dist2": (N,) float32}.
        Raises: UserError for points that are not (N, 3); RuntimeError if a stack push did not fit in this call."""
        points = _check_points(points)
        n = len(points)
        last_n, batch = self._host_last  # a repeated call size skips `_batch`'s lookup
        if n != last_n:
            batch = self._batch(n, host=True)
            self._host_last = (n, batch)
        batch.points[:n] = points  # converted to float32 here
        counts = batch.counts  # zero between calls: a call that counted something adds it to the tree's and clears
        sort = n >= SORT_MIN
        if sort:
            _Ordering.get().sort(batch.points, n, batch.perm, self._launch)
        self._search(batch.searches, (sort,), batch.points, n, batch.perm, sort, batch.outs, counts)
        if counts[kernels.MISSES] or counts[kernels.OVERFLOWS]:
            self._host_counts += counts
            overflows = int(counts[kernels.OVERFLOWS])
            counts[:] = 0
            if overflows:
                raise _overflow_error(overflows, self)
        return batch.results(n)

    def _batch(self, n: int, host: bool) -> _Batch:
        capacity = max(64, 1 << (n - 1).bit_length())
        batch = self._batches.get((capacity, host))
        if batch is None:
            batch = self._batches[capacity, host] = _Batch(capacity, host)
        return batch

    def _search(self, bindings: dict, key: tuple, points, n: int, perm, permuted: bool, outs: tuple, counts,
                warm: bool = False) -> None:
        """The query kernel on points[:n] (arrays), in the order `perm` holds if `permuted`, the answers into `outs`
        (face, bary, point, dist2 arrays), seeded from outs' faces if `warm`. Its binding is kept in `bindings` under
        `key` (what tells these arguments from the others kept there) and the serial flag (the rest are the tree's
        own arrays and sizes; a binding keeps its arrays alive, so ids in a key stay theirs), so a call rewrites at
        most `n`: `_launch`'s general key would cost more than a one-point search (`closest_points` keys its batch's
        own bindings by the sort flag alone)."""
        serial = n <= SERIAL_MAX
        key = (*key, serial)
        bound = bindings.get(key)
        if bound is None:
            bound = bindings[key] = bind(
                kernels.closest_point_query, points, n, *_query_shape(n, serial), perm, int(permuted),
                self.corner_packets, self.bound_packets, self.leaf_start, self.width, self.nodes, self.order,
                self.depth, *outs, counts, self.stack_size, serial, self.face_slot, warm)
        elif bound.args[1] != n:
            for position, value in enumerate((n, *_query_shape(n, serial)), start=1):
                bound.set(position, value)
        bound()

    def brute_force(self, points: np.ndarray) -> dict[str, np.ndarray]:
        """The oracle: the same answers as `closest_points`, by testing every face for every point
        of the mesh as the tree holds it (its last `refit` or `rebuild`)."""
        points = _check_points(points)
        n = len(points)
        batch = self._batch(n, host=True)
        batch.points[:n] = points
        launch(kernels.brute_force_closest, batch.points, n, self.mesh_vertices, self.mesh_faces,
               batch.face, batch.bary, batch.point, batch.dist2)
        return batch.results(n)

    def counters(self) -> dict[str, int]:
        """Queries without an answer and stack pushes that did not fit, since the last reset."""
        values = self.counter.to_numpy() + self._host_counts
        return {"misses": int(values[kernels.MISSES]), "overflows": int(values[kernels.OVERFLOWS])}

    def reset_counters(self) -> None:
        self.counter.fill(0)
        self._host_counts[:] = 0

    def check_overflow(self) -> None:
        """Raise if any query ran out of stack (impossible by the depth bound; checked anyway)."""
        overflows = self.counters()["overflows"]
        if overflows:
            raise _overflow_error(overflows, self)

    def destroy(self) -> None:
        """Free the tree's memory now (its arrays live in its bindings and batches)."""
        self._batches.clear()
        self._host_last = (0, None)
        self._bindings.clear()
        self._searches.clear()
        for name in ("mesh_vertices", "mesh_faces", "tree_faces", "order", "face_slot", "centroids", "leaf_start",
                     "corner_packets", "bound_packets", "node_bound", "nodes", "counter"):
            setattr(self, name, None)


def _overflow_error(overflows: int, bvh: TriangleBVH) -> RuntimeError:
    return RuntimeError(f"BVH query stack overflowed {overflows} times (depth {bvh.depth}, "
                        f"stack {bvh.stack_size}): results are incomplete")


def tree_array(array) -> np.ndarray:
    """One of a tree's arrays (e.g. `bvh.nodes`, `bvh.corner_packets`) as numpy: (N,) for scalars,
    (N, width) float32 for vectors, read quietly (Taichi's `to_numpy` warns on wide vectors).

        >>> from engine import backend
        >>> from engine.meshgen import icosphere
        >>> _ = backend.init("cpu")
        >>> bvh = TriangleBVH.build(*icosphere(2))           # 320 faces: 16 leaves of 20, 5 packets each
        >>> tree_array(bvh.corner_packets).shape, tree_array(bvh.order).shape
        ((80, 36), (320,))
    """
    width = getattr(array, "n", None)  # a VectorNdarray's width
    if width is None:
        return array.to_numpy()
    out = np.empty((array.shape[0], width), np.float32)
    launch(kernels.vectors_to_array, array, out)
    return out
