"""A spatial order for a batch of query points, on the device: a bucket sort by Morton code.

Queries searched in this order descend mostly the same tree nodes and test the same leaves
one after another, so the tree stays in cache: 1.8-2.7x less CPU per query for batches of
262,144 random points (docs/RESULTS.md). Steps, each a launch:

1. `block_boxes`: the points' bounding box, per block of points (and the bucket counts zeroed);
2. `merge_boxes`: the blocks' boxes into one (serial: BOX_BLOCKS of them);
3. `count_buckets`: each point's bucket (the top BUCKET_BITS bits of its Morton code over
   that box), counted with integer atomics (exact);
4. an exclusive scan of the counts (engine.kernels.chamfer_terms.exclusive_scan);
5. `scatter`: perm[i] = the i-th point in bucket order.

Points within a bucket land in the order the threads reach them, which varies run to run;
each query's answer does not depend on its position, so the answers do not vary. A NaN
point goes to bucket 0.
"""
import taichi as ti

BUCKET_BITS = 15  # 5 Morton bits per axis: 32 cells along each side of the points' box
BUCKETS = 1 << BUCKET_BITS
BOX_BLOCKS = 256  # blocks of points whose boxes are merged serially
_INF = float("inf")


@ti.kernel
def block_boxes(points: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), n: ti.i32, boxes: ti.template(),
                counts: ti.template()):
    """boxes[b] = (lo, hi) of the points of block b (n / BOX_BLOCKS of them); counts = 0."""
    for b in range(BOX_BLOCKS):
        lo = ti.Vector([_INF, _INF, _INF], dt=ti.f32)
        hi = ti.Vector([-_INF, -_INF, -_INF], dt=ti.f32)
        for i in range(ti.cast(ti.cast(b, ti.i64) * n // BOX_BLOCKS, ti.i32),
                       ti.cast(ti.cast(b + 1, ti.i64) * n // BOX_BLOCKS, ti.i32)):
            p = points[i]
            if p.dot(p) < _INF:  # finite points only (a NaN or inf one would poison the box)
                lo, hi = ti.min(lo, p), ti.max(hi, p)
        boxes[b] = ti.Vector([lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]])
    for i in range(BUCKETS):
        counts[i] = 0


@ti.kernel
def merge_boxes(boxes: ti.template()):
    """boxes[0] = the union of every block's box."""
    ti.loop_config(serialize=True)
    for b in range(1, BOX_BLOCKS):
        boxes[0] = ti.Vector([ti.min(boxes[0][k], boxes[b][k]) for k in range(3)]
                             + [ti.max(boxes[0][3 + k], boxes[b][3 + k]) for k in range(3)])


@ti.func
def _bucket(p, box):
    """The top BUCKET_BITS bits of p's Morton code over the box (5 bits per axis)."""
    cells = (1 << (BUCKET_BITS // 3)) - 1
    code = 0
    for k in ti.static(range(3)):
        extent = box[3 + k] - box[k]
        g = (p[k] - box[k]) * (cells / ti.select(extent > 0.0, extent, 1.0))
        g = ti.select(g > 0.0, g, 0.0)  # also sends NaN to 0
        cell = ti.cast(ti.select(g < cells, g, cells), ti.i32)
        for bit in ti.static(range(BUCKET_BITS // 3)):
            code |= ((cell >> bit) & 1) << (3 * bit + k)
    return code


@ti.kernel
def count_buckets(points: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), n: ti.i32, boxes: ti.template(),
                  counts: ti.template()):
    for i in range(n):
        ti.atomic_add(counts[_bucket(points[i], boxes[0])], 1)


@ti.kernel
def scatter(points: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), n: ti.i32, boxes: ti.template(), cursor: ti.template(),
            perm: ti.types.ndarray(dtype=ti.i32, ndim=1)):
    """perm[position] = i, each point at its bucket's next free position (cursor: the scan's starts)."""
    for i in range(n):
        perm[ti.atomic_add(cursor[_bucket(points[i], boxes[0])], 1)] = i
