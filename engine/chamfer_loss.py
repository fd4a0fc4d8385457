"""Symmetric Chamfer loss through the BVH, recorded on the tape; and the Laplacian smoother.

    loss = ChamferLoss(x, faces, target, n_samples=8192, seed=0)   # x: vec3 field (V,), needs_grad
    with tape:
        loss.correspond()          # untaped: refit source BVH, query both directions, index slots
        loss.record(tape)          # taped, one launch: held distances + fixed-order sums into loss.value
    tape.backward(loss.value)      # d loss / d x lands in x.grad

The loss is  mean_i |x_i - t(x_i)|^2  +  mean_j |s_j - p(s_j)|^2 :
(a) each source vertex x_i to its closest point t(x_i) on the target surface, through
a static BVH over the target; (b) each of `n_samples` target surface samples s_j
(area-weighted, drawn once per run from `seed`, kept in Morton order) to its closest point p(s_j) on the
source surface, through a BVH over the source refitted on the device every iteration
(and re-sorted on the host every REBUILD_EVERY iterations, which keeps its boxes tight).

Gradients by the envelope theorem (see engine.kernels.chamfer_terms): the queries run
untaped and their answers are held; the taped kernel's adjoint differentiates the squared
distance to the held point, expressed for (b) as the barycentric combination of the
held source triangle's corners, so the gradient spreads onto those three vertices by
barycentric weight. Every sum runs in a fixed order, so one backend gives bit-identical
loss and gradients run to run.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.autodiff.tape import Tape
from engine.triangle_bvh import TriangleBVH, morton_order
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.fit_loss import FitInputs, Loss
from engine.kernels import chamfer_terms
from engine.launch import custom, launch
from engine.mesh_io import Mesh


def sample_surface(mesh: Mesh, n: int, seed: int) -> np.ndarray:
    """`n` points uniformly distributed over the mesh's area (float64 (n, 3)), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    a, b, c = (mesh.vertices[mesh.faces[:, i]] for i in range(3))
    area = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    face = rng.choice(len(area), size=n, p=area / area.sum())
    r1, r2 = rng.random(n), rng.random(n)
    s = np.sqrt(r1)  # uniform over the triangle: (1 - s, s(1 - r2), s r2)
    return (1 - s)[:, None] * a[face] + (s * (1 - r2))[:, None] * b[face] + (s * r2)[:, None] * c[face]


SOURCE_LEAF_SIZE = 12  # its queries are the samples, on its surface: smaller leaves than the default (RESULTS)
REBUILD_EVERY = 25  # source BVH re-sorts: 20-30 % faster fits on spot (docs/RESULTS.md), ~3 ms each


def _no_adjoint() -> None:
    """The closest-point search contributes no gradient of its own (see the module docstring)."""


def _padded(n: int) -> int:
    return -(-n // chamfer_terms.BLOCK) * chamfer_terms.BLOCK


class ChamferLoss(Loss):
    """The symmetric Chamfer loss between a source mesh on the device and a target mesh, through two BVHs.

    Args:
        x: the source vertices, a Taichi vec3 field (V,) of float32 or float64 allocated with
            `needs_grad=True` (the gradient lands in `x.grad`); the field is read, never copied.
        faces: the source triangles, (F, 3) int, indices into `x`.
        target: the target mesh (`engine.mesh_io.Mesh`, e.g. from `load_mesh` or `make_mesh`).
        n_samples: target surface samples (area-weighted, drawn once from `seed`).
        rebuild_every: re-sort the source BVH on the host every this many `correspond` calls (0: never).

    Attributes:
        value: the loss, a 0-d field in `x`'s dtype: mean_i |x_i - t(x_i)|^2 + mean_j |s_j - p(s_j)|^2.

    Raises:
        UserError: `n_samples` < 1, or a mesh the BVH refuses (out-of-range indices, too deep a tree).

    One evaluation, inside `with tape:`: `correspond()` (untaped closest points, held), then
    `record(tape)` (the taped held distances and fixed-order sums); `tape.backward(loss.value)`.
    Same backend, same inputs: bit-identical loss and gradient. `app.scenes.shape_fit.ShapeFit`
    drives it (a term of its `engine.fit_loss.WeightedSum`), with Adam and a `LaplacianSmoother`.

    Example:
        >>> import taichi as ti
        >>> from engine import backend, meshgen
        >>> from engine.autodiff.tape import Tape
        >>> from engine.fields import FieldGroup
        >>> from engine.mesh_io import make_mesh
        >>> _ = backend.init("cpu")
        >>> sphere, faces = meshgen.icosphere(2)
        >>> group = FieldGroup()
        >>> x = group.vector(3, ti.f32, (len(sphere),), needs_grad=True)
        >>> _ = group.finalize()
        >>> x.from_numpy(sphere.astype("float32"))
        >>> loss, tape = ChamferLoss(x, faces, make_mesh(*meshgen.blob(3), "blob"), n_samples=1024), Tape()
        >>> with tape:
        ...     loss.correspond()
        ...     loss.record(tape)
        >>> tape.backward(loss.value)
        >>> loss.value[None] > 0.0, x.grad.to_numpy().shape, loss.misses()
        (True, (162, 3), 0)
        >>> loss.destroy(); group.destroy()
    """

    def __init__(self, x, faces: np.ndarray, target: Mesh, n_samples: int = 8192, seed: int = 0,
                 rebuild_every: int = REBUILD_EVERY):
        if n_samples < 1:
            raise UserError(f"Chamfer needs at least one target sample, got {n_samples}")
        self.x = x
        self.n_vertices, self.n_samples = x.shape[0], n_samples
        self.target = target
        dtype = x.dtype
        g = self.group = FieldGroup()
        self.faces = g.vector(3, ti.i32, (len(faces),))
        # The samples and the searches' answers are ndarrays, which the BVH searches read and write in place (no
        # gather or scatter launches): (a) the held target point per source vertex; (b) the held source face and
        # barycentrics per sample; the rest is the searches' scratch.
        vec3 = lambda n: ti.ndarray(ti.math.vec3, (n,))  # noqa: E731
        self.samples = vec3(n_samples)
        ints = lambda n: ti.ndarray(ti.i32, (n,))  # noqa: E731
        self.held_point, self.query_face, self.query_bary = vec3(self.n_vertices), ints(self.n_vertices), vec3(self.n_vertices)
        self.held_face, self.held_bary, self.query_point = ints(n_samples), vec3(n_samples), vec3(n_samples)
        self.query_dist2 = ti.ndarray(ti.f32, (max(self.n_vertices, n_samples),))
        # the per-element terms and block sums (scratch of the fixed-order sums: the adjoint needs no gradient of them)
        self.terms_a = g.field(dtype, (_padded(self.n_vertices),))
        self.terms_b = g.field(dtype, (_padded(n_samples),))
        self.partial_a = g.field(dtype, (self.terms_a.shape[0] // chamfer_terms.BLOCK,))
        self.partial_b = g.field(dtype, (self.terms_b.shape[0] // chamfer_terms.BLOCK,))
        self.value = g.field(dtype, (), needs_grad=True)
        # vertex -> (sample, corner) slot index for the fixed-order scatter (see engine.kernels.chamfer_terms)
        self.ref_count = g.field(ti.i32, (self.n_vertices,))
        self.ref_start = g.field(ti.i32, (self.n_vertices + 1,))
        self.ref_cursor = g.field(ti.i32, (self.n_vertices,))
        self.ref_blocks = g.field(ti.i32, (-(-self.n_vertices // chamfer_terms.SCAN_BLOCK),))
        self.slots = g.field(ti.i32, (3 * n_samples,))
        g.finalize()
        self._forget_answers()
        self.faces.from_numpy(np.asarray(faces, dtype=np.int32))
        samples = sample_surface(target, n_samples, seed)
        self.samples.from_numpy(samples[morton_order(samples)].astype(np.float32))  # coherent queries: faster
        self.source_bvh: TriangleBVH | None = None
        self.target_bvh: TriangleBVH | None = None
        self.rebuild_every = rebuild_every
        self.warm_start = True  # queries start from the last answers (`_correspond`); `bench fit_iteration` compares
        self.correspondences = 0  # correspond calls so far, looks not counted: every rebuild_every-th re-sorts

    @classmethod
    def for_fit(cls, inputs: FitInputs) -> "ChamferLoss":
        return cls(inputs.x, inputs.faces, inputs.target, inputs.n_samples, inputs.seed)

    def _bvhs(self) -> tuple[TriangleBVH, TriangleBVH]:
        if self.source_bvh is None:  # built on first use: the held-math tests run float64 fields without a BVH
            self.target_bvh = TriangleBVH.build(self.target.vertices, self.target.faces)
            self.source_bvh = TriangleBVH(self.x, self.faces, leaf_size=SOURCE_LEAF_SIZE)
        return self.source_bvh, self.target_bvh

    def correspond(self, look: bool = False) -> None:
        """Refit the source BVH (re-sort it every `rebuild_every` calls), find and hold both
        directions' closest points. Untaped work; inside a tape it is recorded as a custom step
        with no adjoint (the envelope theorem: no gradient flows through the argmin), so the
        tape inspector lists it with its time. A `look` does what the next call would do and
        leaves the re-sort schedule where it was (the fit runs the same however often it is looked at)."""
        custom("chamfer: closest points (BVH, untaped)", lambda: self._correspond(look), _no_adjoint,
               reads=[self.x, self.samples], writes=[self.held_point, self.held_face, self.held_bary])

    def _correspond(self, look: bool) -> None:
        source, target = self._bvhs()
        calls = self.correspondences + 1
        if not look:
            self.correspondences = calls
        resorted = bool(self.rebuild_every and calls % self.rebuild_every == 0)
        if resorted:
            source.rebuild()  # re-sort: boxes of a tree sorted for the sphere overlap as it deforms
        else:
            source.refit()
        # warm: each search starts from the face it found last time (the fit moves the mesh a little
        # per iteration), which bounds it from the start; the same distances, found faster. The points are the
        # source tree's own copy of x, made by its refit; their Morton order is sorted again only when the tree is.
        target.query(source.mesh_vertices, self.query_face, self.query_bary, self.held_point, self.query_dist2,
                     self.n_vertices, warm=self.warm_start, resort=resorted)
        source.query(self.samples, self.held_face, self.held_bary, self.query_point, self.query_dist2,
                     self.n_samples, presorted=True, warm=self.warm_start)  # the samples are in Morton order
        self.index_slots()

    def restart_at_current_vertices(self) -> None:
        """Put the source BVH where a new loss over the current vertices would start: sorted for
        them, with the re-sort schedule restarted (a reused loss then answers bit for bit as a new one)."""
        if self.source_bvh is not None:
            self.source_bvh.rebuild()
        self.correspondences = 0
        self._forget_answers()

    def _forget_answers(self) -> None:
        """No earlier answers: the next searches start cold (-1 is no warm-start hint), as a new loss's."""
        self.query_face.fill(-1)
        self.held_face.fill(-1)

    def hold(self, held_point: np.ndarray, held_face: np.ndarray, held_bary: np.ndarray) -> None:
        """Set the held correspondences directly (tests: gradients under held correspondence)."""
        self.held_point.from_numpy(np.asarray(held_point, np.float32))
        self.held_face.from_numpy(np.asarray(held_face, np.int32))
        self.held_bary.from_numpy(np.asarray(held_bary, np.float32))
        self.index_slots()

    def index_slots(self) -> None:
        """Untaped: the vertex -> slot index the fixed-order scatter walks (integer atomics: exact)."""
        launch(chamfer_terms.index_slots, self.faces, self.held_face, self.n_samples, self.ref_count, self.ref_start,
               self.ref_cursor, self.ref_blocks, self.slots)

    def record(self, tape: Tape) -> None:
        """Taped, one launch: the held squared distances and their fixed-order sums into `self.value` (its
        adjoint, written out, scatters into the vertices in a fixed order)."""
        launch(chamfer_terms.chamfer_total, self.x, self.held_point, self.n_vertices, 1.0 / self.n_vertices,
               self.samples, self.faces, self.held_face, self.held_bary, self.n_samples, 1.0 / self.n_samples,
               self.ref_start, self.slots, self.terms_a, self.terms_b, self.partial_a, self.partial_b, self.value,
               name="chamfer: held distances and their sums")

    def misses(self) -> int:
        """Queries without an answer since the BVHs were built (both directions)."""
        return sum(bvh.counters()["misses"] for bvh in self._bvhs())

    def destroy(self) -> None:
        for bvh in (self.source_bvh, self.target_bvh):
            if bvh is not None:
                bvh.destroy()
        self.group.destroy()


class LaplacianSmoother:
    """x <- x + lam (mean of neighbours - x), one Jacobi step on the device; topology fixed at construction."""

    def __init__(self, x, faces: np.ndarray):
        n = x.shape[0]
        edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
        edges = np.unique(np.concatenate([edges, edges[:, ::-1]]), axis=0)  # sorted by (i, j): CSR order
        start = np.searchsorted(edges[:, 0], np.arange(n + 1)).astype(np.int32)
        if np.any(np.diff(start) == 0):
            raise UserError("Laplacian smoothing needs every vertex on a face")
        self.x = x
        self.group = FieldGroup()
        self.start = self.group.field(ti.i32, (n + 1,))
        self.neighbours = self.group.field(ti.i32, (len(edges),))
        self.scratch = self.group.vector(3, x.dtype, (n,))
        self.group.finalize()
        self.start.from_numpy(start)
        self.neighbours.from_numpy(edges[:, 1].astype(np.int32))

    def step(self, lam: float) -> None:
        launch(chamfer_terms.laplacian_step, self.x, self.start, self.neighbours, lam, self.scratch)

    def destroy(self) -> None:
        self.group.destroy()
