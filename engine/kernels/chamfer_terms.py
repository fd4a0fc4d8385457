"""Chamfer terms against held correspondences, fixed-order reductions, and Laplacian smoothing.

The closest-point search (engine.kernels.bvh_query) uses `while`/`break`, which Taichi's
reverse-mode AD rejects, so it runs untaped and its answers are *held*: the envelope
theorem says d/dx min_y |x - y|^2 = d/dx |x - y*|^2 with the argmin y* held fixed.
The taped kernels here compute those held squared distances:

- `held_point_terms`: source vertex i to the target point held for it (a constant);
- `held_face_terms`: target sample j to the source triangle held for it, as the
  barycentric combination of that triangle's three corners, so Taichi's AD spreads
  the term's gradient onto the corners by barycentric weight.

Reproducibility: every reduction runs in a fixed order, never float atomics into one
address (their order depends on the thread schedule, so sums differ in the last bits
run to run). Per-element terms go into an array; `block_sums` adds blocks of BLOCK
terms in a fixed unrolled order; `serial_total` adds the blocks in index order.
The target-to-source gradient needs a scatter (many samples onto one vertex): the
corners of each held triangle are first gathered into a per-sample array
(`gather_corners`, with its declared custom adjoint), and that gather's adjoint adds the
corner gradients into each vertex in ascending (sample, corner) order, through a
vertex -> slot index built by `count_refs`, `exclusive_scan`, `fill_slots`
(integer atomics: exact) and sorted per vertex by `gather_corners_adjoint`.
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint

BLOCK = 32  # terms per block sum: unrolled, so Taichi AD needs no stack for it
SCAN_BLOCK = 64  # counts per block of the slot-index scan


@ti.func
def _face(face_id, j):
    # A query that found no face (only a NaN point does) holds -1; read face 0 instead of memory
    # outside the field. The BVH counts it as a miss, and every fit reports and checks misses.
    return ti.max(face_id[j], 0)


@ti.kernel
def held_point_terms(x: ti.template(), held: ti.template(), n: ti.i32, weight: ti.f64, terms: ti.template()):
    """terms[i] = weight * |x[i] - held[i]|^2 for i < n."""
    for i in range(n):
        d = x[i] - held[i]
        terms[i] = ti.cast(weight, terms.dtype) * d.dot(d)


@ti.kernel
def held_face_terms(samples: ti.template(), corners: ti.template(), bary: ti.template(), n: ti.i32,
                    weight: ti.f64, terms: ti.template()):
    """terms[j] = weight * |s_j - (b0 c_j0 + b1 c_j1 + b2 c_j2)|^2 for j < n (corners: (n, 3))."""
    for j in range(n):
        b = ti.cast(bary[j], corners.dtype)
        q = b[0] * corners[j, 0] + b[1] * corners[j, 1] + b[2] * corners[j, 2]
        d = ti.cast(samples[j], corners.dtype) - q
        terms[j] = ti.cast(weight, terms.dtype) * d.dot(d)


@ti.kernel
def gather_corners(x: ti.template(), faces: ti.template(), face_id: ti.template(), n: ti.i32,
                   corners: ti.template(), start: ti.template(), slots: ti.template()):
    """corners[j, k] = x[faces[face_id[j]][k]]: the held triangle's corners, one row per sample.

    `start`/`slots` (the vertex -> slot index of `index_slots`) are for its adjoint only."""
    for j, k in ti.ndrange(n, 3):
        corners[j, k] = x[faces[_face(face_id, j)][k]]


@custom_adjoint(gather_corners)
@ti.kernel
def gather_corners_adjoint(x: ti.template(), faces: ti.template(), face_id: ti.template(), n: ti.i32,
                           corners: ti.template(), start: ti.template(), slots: ti.template()):
    """x.grad[v] += corners.grad over v's (sample, corner) slots in ascending slot order: the
    gather's scatter in a fixed order (Taichi's own adjoint would be a float atomic_add)."""
    for v in range(start.shape[0] - 1):
        lo, hi = start[v], start[v + 1]
        for i in range(lo + 1, hi):  # insertion sort: ranges hold a few dozen slots
            key = slots[i]
            at = i
            while at > lo and slots[at - 1] > key:
                slots[at] = slots[at - 1]
                at -= 1
            slots[at] = key
        acc = x.grad[v] * 0.0
        for i in range(lo, hi):
            s = slots[i]
            acc += corners.grad[s // 3, s % 3]
        x.grad[v] += acc


@ti.kernel
def count_refs(faces: ti.template(), face_id: ti.template(), n: ti.i32, count: ti.template()):
    """count[v] = how many (sample, corner) slots reference vertex v (count zeroed first)."""
    for j, k in ti.ndrange(n, 3):
        ti.atomic_add(count[faces[_face(face_id, j)][k]], 1)


@ti.kernel
def exclusive_scan(count: ti.template(), start: ti.template(), cursor: ti.template(), block_total: ti.template()):
    """start[v] = sum of count[:v] (start has one more entry: the total); cursor = start.

    Two levels, so the serial part is V / SCAN_BLOCK long (a GPU runs a serial loop on one
    thread): scan each block of SCAN_BLOCK counts in parallel, scan the block totals serially
    (block_total: ceil(V / SCAN_BLOCK) entries), then add each block's offset in parallel.
    """
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


@ti.kernel
def fill_slots(faces: ti.template(), face_id: ti.template(), n: ti.i32, cursor: ti.template(),
               slots: ti.template()):
    """Place slot id 3j + k in its vertex's range (order within a range is arbitrary: sorted later)."""
    for j, k in ti.ndrange(n, 3):
        at = ti.atomic_add(cursor[faces[_face(face_id, j)][k]], 1)
        slots[at] = 3 * j + k


@ti.kernel
def block_sums(terms: ti.template(), partial: ti.template()):
    """partial[b] = terms[b*BLOCK] + ... + terms[b*BLOCK + BLOCK-1], left to right (terms padded with 0)."""
    for b in partial:
        s = terms[b * BLOCK]
        for k in ti.static(range(1, BLOCK)):
            s += terms[b * BLOCK + k]
        partial[b] = s


@ti.kernel
def serial_total(partial: ti.template(), total: ti.template()):
    """total[None] += partial[0] + partial[1] + ... in index order, on one thread (total zeroed first)."""
    ti.loop_config(serialize=True)
    for b in range(partial.shape[0]):
        total[None] += partial[b]


@ti.kernel
def laplacian_step(x: ti.template(), neighbour_start: ti.template(), neighbours: ti.template(), lam: ti.f64,
                   out: ti.template()):
    """out[i] = x[i] + lam * (mean of x over i's neighbours - x[i]): one uniform-Laplacian smoothing step."""
    for i in range(neighbour_start.shape[0] - 1):
        lo, hi = neighbour_start[i], neighbour_start[i + 1]
        mean = x[i] * 0.0
        for k in range(lo, hi):
            mean += x[neighbours[k]]
        mean /= ti.cast(hi - lo, x.dtype)
        out[i] = x[i] + ti.cast(lam, x.dtype) * (mean - x[i])


@ti.kernel
def copy_vectors(src: ti.template(), dst: ti.template()):
    for i in src:
        dst[i] = src[i]
