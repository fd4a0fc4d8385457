"""Chamfer terms against held correspondences, fixed-order reductions, and Laplacian smoothing.

The closest-point search (engine.kernels.bvh_query) uses `while`/`break`, which Taichi's
reverse-mode AD rejects, so it runs untaped and its answers are *held*: the envelope
theorem says d/dx min_y |x - y|^2 = d/dx |x - y*|^2 with the argmin y* held fixed.
One taped kernel, `chamfer_total`, computes those held squared distances and their sum:

- source vertex i to the target point held for it (a constant);
- target sample j to the source triangle held for it, as the barycentric combination
  of that triangle's three corners, so the term's gradient spreads onto the corners by
  barycentric weight.

Its adjoint, `chamfer_total_adjoint`, is written out beside it: one launch forward and one
back for the whole loss (a launch is what a GPU iteration pays the host for; issue 29).

Reproducibility: every reduction runs in a fixed order, never float atomics into one
address (their order depends on the thread schedule, so sums differ in the last bits
run to run). Per-element terms go into an array; blocks of BLOCK terms are added in a
fixed unrolled order; the block sums in index order on one thread. The target-to-source
gradient is a scatter (many samples onto one vertex): the adjoint adds the corner
gradients into each vertex in ascending (sample, corner) order, through a vertex -> slot
index built by `index_slots` (integer atomics: exact), each vertex's slots sorted first.
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint

BLOCK = 32  # terms per block sum: unrolled, so Taichi AD needs no stack for it
SCAN_BLOCK = 64  # counts per block of the slot-index scan
# the searches' answers and the samples: ndarrays, which the BVH's searches write in place (engine.chamfer_loss)
Vectors = ti.types.ndarray(dtype=ti.math.vec3, ndim=1)
Ints = ti.types.ndarray(dtype=ti.i32, ndim=1)


@ti.func
def _face(face_id: ti.template(), j):
    # A query that found no face (only a NaN point does) holds -1; read face 0 instead of memory
    # outside the field. The BVH counts it as a miss, and every fit reports and checks misses.
    return ti.max(face_id[j], 0)


@ti.func
def _held_point_on_face(x: ti.template(), faces: ti.template(), face_id: ti.template(), bary: ti.template(), j):
    """q_j = b_j0 c_j0 + b_j1 c_j1 + b_j2 c_j2: sample j's held point on its held triangle, in x's precision."""
    b = ti.cast(bary[j], x.dtype)
    f = faces[_face(face_id, j)]
    return b[0] * x[f[0]] + b[1] * x[f[1]] + b[2] * x[f[2]]


@ti.kernel
def chamfer_total(x: ti.template(), held: Vectors, n_vertices: ti.i32, weight_a: ti.f64, samples: Vectors,
                  faces: ti.template(), face_id: Ints, bary: Vectors, n_samples: ti.i32, weight_b: ti.f64,
                  start: ti.template(), slots: ti.template(), terms_a: ti.template(), terms_b: ti.template(),
                  partial_a: ti.template(), partial_b: ti.template(), total: ti.template()):
    """total[None] = weight_a sum_i |x_i - held_i|^2 + weight_b sum_j |s_j - q_j|^2 (i < n_vertices, j < n_samples,
    q_j the held point on sample j's held triangle), each sum in a fixed order: the terms into `terms_a`/`terms_b`
    (padded to whole blocks with zeros), blocks of BLOCK left to right into `partial_a`/`partial_b`, then the
    blocks in index order, a's before b's, on one thread. `start`/`slots` (`index_slots`) are for its adjoint."""
    for i in range(n_vertices):
        d = x[i] - held[i]
        terms_a[i] = ti.cast(weight_a, terms_a.dtype) * d.dot(d)
    for j in range(n_samples):
        d = ti.cast(samples[j], x.dtype) - _held_point_on_face(x, faces, face_id, bary, j)
        terms_b[j] = ti.cast(weight_b, terms_b.dtype) * d.dot(d)
    for b in partial_a:
        partial_a[b] = _block_sum(terms_a, b)
    for b in partial_b:
        partial_b[b] = _block_sum(terms_b, b)
    ti.loop_config(serialize=True)
    for _ in range(1):
        acc = ti.cast(0.0, total.dtype)
        for b in range(partial_a.shape[0]):
            acc += partial_a[b]
        for b in range(partial_b.shape[0]):
            acc += partial_b[b]
        total[None] = acc


@custom_adjoint(chamfer_total)
@ti.kernel
def chamfer_total_adjoint(x: ti.template(), held: Vectors, n_vertices: ti.i32, weight_a: ti.f64, samples: Vectors,
                          faces: ti.template(), face_id: Ints, bary: Vectors, n_samples: ti.i32, weight_b: ti.f64,
                          start: ti.template(), slots: ti.template(), terms_a: ti.template(),
                          terms_b: ti.template(), partial_a: ti.template(), partial_b: ti.template(),
                          total: ti.template()):
    """x.grad += d total / d x, written out: each sample term's corner gradients, d/dc_jk = -2 weight_b b_jk
    (s_j - q_j), added into each vertex in ascending (sample, corner) slot order through the slot index (a
    gather's adjoint is a scatter: a fixed order instead of float atomics); then each vertex term's own,
    2 weight_a (x_i - held_i)."""
    for v in range(start.shape[0] - 1):
        lo, hi = start[v], start[v + 1]
        for i in range(lo + 1, hi):  # insertion sort: ranges hold a few dozen slots
            key = slots[i]
            at = i
            while at > lo and slots[at - 1] > key:
                slots[at] = slots[at - 1]
                at -= 1
            slots[at] = key
        scale = ti.cast(-2.0 * weight_b, x.dtype) * ti.cast(total.grad[None], x.dtype)
        acc = x.grad[v] * 0.0
        for i in range(lo, hi):
            j, k = slots[i] // 3, slots[i] % 3
            d = ti.cast(samples[j], x.dtype) - _held_point_on_face(x, faces, face_id, bary, j)
            acc += scale * ti.cast(bary[j][k], x.dtype) * d
        x.grad[v] += acc
    for i in range(n_vertices):
        x.grad[i] += ti.cast(2.0 * weight_a, x.dtype) * ti.cast(total.grad[None], x.dtype) * (x[i] - held[i])


@ti.kernel
def index_slots(faces: ti.template(), face_id: Ints, n: ti.i32, count: ti.template(),
                start: ti.template(), cursor: ti.template(), block_total: ti.template(), slots: ti.template()):
    """The vertex -> (sample, corner) slot index: count[v] the slots that reference vertex v, start[v] the first of
    them in `slots` (an exclusive scan of the counts), slots[start[v]:start[v + 1]] their ids 3j + k (in an
    order the adjoint sorts: integer atomics place them)."""
    for v in count:
        count[v] = 0
    for j, k in ti.ndrange(n, 3):
        ti.atomic_add(count[faces[_face(face_id, j)][k]], 1)
    _exclusive_scan(count, start, cursor, block_total)
    for j, k in ti.ndrange(n, 3):
        at = ti.atomic_add(cursor[faces[_face(face_id, j)][k]], 1)
        slots[at] = 3 * j + k


@ti.kernel
def exclusive_scan(count: ti.template(), start: ti.template(), cursor: ti.template(), block_total: ti.template()):
    """start[v] = sum of count[:v] (start has one more entry: the total); cursor = start (see `_exclusive_scan`)."""
    _exclusive_scan(count, start, cursor, block_total)


@ti.func
def _exclusive_scan(count, start, cursor, block_total):
    """Two levels, so the serial part is V / SCAN_BLOCK long (a GPU runs a serial loop on one
    thread): scan each block of SCAN_BLOCK counts in parallel, scan the block totals serially
    (block_total: ceil(V / SCAN_BLOCK) entries), then add each block's offset in parallel. Its loops
    are the calling kernel's own top-level loops (a ti.func is inlined), so they run in parallel."""
    n = count.shape[0]
    blocks = (n + SCAN_BLOCK - 1) // SCAN_BLOCK
    for b in range(blocks):
        acc = 0
        for i in range(b * SCAN_BLOCK, ti.min((b + 1) * SCAN_BLOCK, n)):
            start[i] = acc
            acc += count[i]
        block_total[b] = acc
    ti.loop_config(serialize=True)
    for b in range(1, blocks):
        block_total[b] += block_total[b - 1]
    for i in range(n):
        b = i // SCAN_BLOCK
        if b > 0:
            start[i] += block_total[b - 1]
        cursor[i] = start[i]
    start[n] = block_total[blocks - 1]


@ti.func
def _block_sum(terms, b):
    """terms[b*BLOCK] + ... + terms[b*BLOCK + BLOCK-1], left to right (unrolled)."""
    s = terms[b * BLOCK]
    for k in ti.static(range(1, BLOCK)):
        s += terms[b * BLOCK + k]
    return s


@ti.kernel
def laplacian_step(x: ti.template(), neighbour_start: ti.template(), neighbours: ti.template(), lam: ti.f64,
                   scratch: ti.template()):
    """x[i] <- x[i] + lam * (mean of x over i's neighbours - x[i]): one uniform-Laplacian (Jacobi) smoothing step,
    every vertex from the old positions (the new ones in `scratch` first, copied back by a second loop)."""
    for i in range(neighbour_start.shape[0] - 1):
        lo, hi = neighbour_start[i], neighbour_start[i + 1]
        mean = x[i] * 0.0
        for k in range(lo, hi):
            mean += x[neighbours[k]]
        mean /= ti.cast(hi - lo, x.dtype)
        scratch[i] = x[i] + ti.cast(lam, x.dtype) * (mean - x[i])
    for i in scratch:
        x[i] = scratch[i]
