"""Triangle BVH on the device: build, refit, closest-point query, and the brute-force oracle.

Tree layout: an implicit complete 4-ary tree of `depth` levels below the root. Node i has
children 4i+1 .. 4i+4 (no child pointers); the inner nodes are [0, first_leaf) with
first_leaf = (4^depth - 1) / 3, and leaf k is node first_leaf + k. Leaf k owns the faces
order[leaf_start[k] .. leaf_start[k+1]) (between 1 and the leaf size of them), sorted there
by `split_level`: a median split along the longest centroid axis, two binary levels per
4-ary level, done on the device.

Bounds. Every node has a box and a slab-cylinder: a unit axis n, a centre c, a lateral radius
R and a half-thickness T such that every point x of its triangles has |n.(x - c)| <= T and a
distance at most R from the axis. With w = p - c, h = n.w, u = w - h n:
    d(p, node)^2 >= max(|h| - T, 0)^2 + max(|u| - R, 0)^2
Far tighter than the box on the curved and flat patches of real meshes, where boxes are
loose whenever the patch is not axis-aligned. A leaf's cylinder is exact over its corners
(axis: its area-weighted normal); an inner node's holds each child's cylinder and box.

- `nodes[i]` (inner node i, NODE_WIDTH floats) holds its four children's bounds lane by lane:
  lo.x of children 0..3, lo.y 0..3, ..., so one read gives the four lower bounds, which LLVM
  computes in one vector (see `_search`), and which order the descent.
- `node_bound[i]` (BOUND_WIDTH floats): node i's own bound, the refit's scratch.
- Leaf k's triangles sit in `width` slots (a multiple of 4) from k width: `corners[t]` (a, b, c)
  and, four slots to a packet, `packets[t // 4]` their bounds lane by lane: the plane normal,
  the centroid, the radius of the corners about it, and a slack (below). That is the same
  bound with T = 0: a disc, which skips most triangles before the exact point-triangle test.
  Slots past a leaf's count hold NaN corners (never near).

Rounding. Every cylinder bound is used less a slack, SLACK w.w + SLACK (R^2 + T^2), so
that float32 rounding can never skip a triangle the brute-force kernel would pick: answers
equal the brute-force kernel's, evaluated by the same triangle function. A triangle's
corners lie within T of its computed plane (rounding, or the inaccurate normal of a sliver);
that T is folded into its slack, as 2|h|T <= SLACK h^2 + T^2 / SLACK.

Stack bound (why overflow cannot happen): at an inner node the query sorts the four
children by their bound, descends into the nearest and pushes at most the three others,
so the stack never holds more than 3 depth entries; the host refuses trees deeper than
STACK_SIZE / 3 (tests pass a smaller `stack_size` to exercise the guard). The kernel still
counts any push that would not fit (`counters[1]`) rather than trust the proof silently;
the host raises.

These kernels use `while`/`break`, which Taichi's reverse-mode AD rejects: run them
untaped; gradients come from the envelope theorem on the returned face and barycentrics.
"""
import taichi as ti

from engine.kernels.spread import spread_block
from engine.kernels.triangle import closest_point_on_triangle

STACK_SIZE = 32  # entries per query thread; >= 3 depth is enough (see module docstring)
MISSES, OVERFLOWS = 0, 1  # indices into the counters field
SLACK = 4e-6  # bound slack relative to the squared size of the bound's geometry (see module docstring)
CORNER_PACKET = 36  # four slots' corners a, b, c, coordinate by coordinate: a.x of slots 0..3, a.y, ..., c.z
BOUND_PACKET = 32  # four slots' disc bounds the same way: normal, centroid, radius, slack
BOUND_WIDTH = 14  # floats of a node's bound: box lo, hi; slab-cylinder axis, centre, radius, thickness
NODE_WIDTH = 4 * BOUND_WIDTH  # an inner node's record: its four children's bounds, lane by lane
REL_ROUND = 1.2e-7  # float32 rounding, relative
_INF = float("inf")
_NAN = float("nan")


@ti.func
def _max(a, b):
    # a > b ? a : b compiles to one maxss; ti.max adds NaN fix-ups the bounds do not need
    return ti.select(a > b, a, b)


@ti.func
def _min(a, b):
    return ti.select(a < b, a, b)


@ti.func
def _box_distance2(p, lo, hi):
    d = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
    for k in ti.static(range(3)):
        d[k] = _max(_max(lo[k] - p[k], p[k] - hi[k]), 0.0)
    return d.dot(d)


@ti.func
def _cylinder_distance2(p, axis, centre, radius, thickness, slack):
    """A lower bound on the squared distance from p to anything inside the slab-cylinder
    (unit axis, centre, lateral radius, half-thickness), less the rounding slack:
    SLACK w.w plus the cylinder's own `slack` (see the module docstring)."""
    w = p - centre
    h = axis.dot(w)
    u = w - h * axis
    lateral = _max(ti.sqrt(u.dot(u)) - radius, 0.0)
    axial = _max(ti.abs(h) - thickness, 0.0)
    return axial * axial + lateral * lateral - SLACK * w.dot(w) - slack


@ti.func
def _unit(v):
    """v / |v|, or +z for a zero vector."""
    length = ti.sqrt(v.dot(v))
    return ti.select(length > 0.0, v * (1.0 / _max(length, 1e-30)), ti.Vector([0.0, 0.0, 1.0], dt=ti.f32))


@ti.func
def _disc(a, b, c):
    """The disc bound of triangle (a, b, c): the unit plane normal u, the centroid m, the radius of
    the corners about m (which bounds the lateral one) and the slack, and the unnormalised normal n.
    The corners' distance T from the computed plane (rounding, or the inaccurate normal of a sliver)
    goes into the slack: 2|h|T <= SLACK h^2 + T^2 / SLACK. One triangle in scalars: on the CPU,
    LLVM gives the fewest instructions per triangle that way (four slots' lanes at once came out
    mostly scalar anyway, with shuffles and spills; docs/RESULTS.md)."""
    e1, e2 = b - a, c - a
    n = ti.Vector([e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2], e1[0] * e2[1] - e1[1] * e2[0]])
    length = ti.sqrt(n.dot(n))
    u = ti.select(length > 0.0, n * (1.0 / _max(length, 1e-30)), ti.Vector([0.0, 0.0, 1.0], dt=ti.f32))  # `_unit`
    m = (a + b + c) * (1.0 / 3.0)
    wa, wb, wc = a - m, b - m, c - m
    radius = ti.sqrt(_max(_max(wa.dot(wa), wb.dot(wb)), wc.dot(wc)))
    thickness = _max(_max(ti.abs(u.dot(wa)), ti.abs(u.dot(wb))), ti.abs(u.dot(wc)))
    return u, m, radius, SLACK * radius * radius + thickness * thickness * (1.0 / SLACK), n


@ti.func
def _slot_corners_at(packets: ti.template(), index, lane):
    """The corners of slot `lane` of packets[index], nine reads at a run-time lane."""
    return (ti.Vector([packets[index][lane], packets[index][4 + lane], packets[index][8 + lane]]),
            ti.Vector([packets[index][12 + lane], packets[index][16 + lane], packets[index][20 + lane]]),
            ti.Vector([packets[index][24 + lane], packets[index][28 + lane], packets[index][32 + lane]]))


@ti.func
def _bound_vector(lo, hi, axis, centre, radius, thickness):
    return ti.Vector([lo[0], lo[1], lo[2], hi[0], hi[1], hi[2], axis[0], axis[1], axis[2], centre[0], centre[1],
                      centre[2], radius, thickness], dt=ti.f32)


@ti.func
def _lane(record, lane):
    """Child `lane`'s bound out of a node record: (lo, hi, axis, centre, radius, thickness)."""
    return (ti.Vector([record[lane], record[4 + lane], record[8 + lane]]),
            ti.Vector([record[12 + lane], record[16 + lane], record[20 + lane]]),
            ti.Vector([record[24 + lane], record[28 + lane], record[32 + lane]]),
            ti.Vector([record[36 + lane], record[40 + lane], record[44 + lane]]), record[48 + lane], record[52 + lane])


@ti.func
def _child(bound):
    """A node's bound (BOUND_WIDTH floats) as (lo, hi, axis, centre, radius, thickness)."""
    return (ti.Vector([bound[0], bound[1], bound[2]]), ti.Vector([bound[3], bound[4], bound[5]]),
            ti.Vector([bound[6], bound[7], bound[8]]), ti.Vector([bound[9], bound[10], bound[11]]), bound[12],
            bound[13])


@ti.func
def _node_bound(bounds):
    """An inner node's bound from its four children's (BOUND_WIDTH floats each): the union box,
    and a slab-cylinder around the children's mean axis that holds each child's cylinder and box
    (the smaller of the two extents per child, both conservative)."""
    children = [_child(bounds[lane]) for lane in ti.static(range(4))]  # split once, read by both loops
    lo = ti.Vector([_INF, _INF, _INF], dt=ti.f32)
    hi = ti.Vector([-_INF, -_INF, -_INF], dt=ti.f32)
    axis = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
    for lane in ti.static(range(4)):
        l_lo, l_hi, l_axis, _, l_radius, _ = children[lane]
        lo, hi = _min(lo, l_lo), _max(hi, l_hi)
        axis += l_axis * (l_radius * l_radius)  # children's axes weighted by their (area-like) R^2
    axis = _unit(axis)
    centre = (lo + hi) * 0.5
    radius = 0.0
    thickness = 0.0
    for lane in ti.static(range(4)):
        l_lo, l_hi, l_axis, l_centre, l_radius, l_thickness = children[lane]
        if l_lo[0] <= l_hi[0]:  # empty children add nothing
            w = l_centre - centre
            h = axis.dot(w)
            lateral = ti.sqrt((w - h * axis).norm_sqr())
            cos = ti.abs(axis.dot(l_axis))
            sin = ti.sqrt(_max(1.0 - cos * cos, 0.0))
            r = lateral + l_radius + l_thickness * sin
            t = ti.abs(h) + l_thickness * cos + l_radius * sin
            # the child's box: its extent along the axis is exact (a linear function over a box),
            # laterally its half-diagonal bounds every corner's offset from the box centre
            half = (l_hi - l_lo) * 0.5
            wb = (l_lo + l_hi) * 0.5 - centre
            hb = axis.dot(wb)
            box_t = ti.abs(hb) + ti.abs(axis).dot(half)
            box_r = ti.sqrt((wb - hb * axis).norm_sqr()) + ti.sqrt(half.dot(half))
            radius = _max(radius, _min(r, box_r) * (1.0 + 4.0 * REL_ROUND))
            thickness = _max(thickness, _min(t, box_t) * (1.0 + 4.0 * REL_ROUND))
    if lo[0] > hi[0]:
        centre = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
    return _bound_vector(lo, hi, axis, centre, radius, thickness)


@ti.func
def _record(bounds):
    """A node record from its four children's bounds (BOUND_WIDTH floats each), lane by lane."""
    return ti.Vector([bounds[lane][k] for k in ti.static(range(BOUND_WIDTH)) for lane in ti.static(range(4))],
                     dt=ti.f32)


@ti.func
def _refit_node(nodes: ti.template(), node_bound: ti.template(), i):
    """Inner node i's record and its own bound, both from its children's bounds."""
    c = 4 * i + 1
    bounds = (node_bound[c], node_bound[c + 1], node_bound[c + 2], node_bound[c + 3])
    nodes[i] = _record(bounds)
    node_bound[i] = _node_bound(bounds)


@ti.kernel
def copy_vertices(source: ti.template(), vertices: ti.types.ndarray(), serial: ti.template()):
    """The mesh's current vertices (a field of the caller's) into the tree's own array, as
    float32; `serial` for a small mesh, where waking the thread pool costs more than the copy."""
    ti.loop_config(serialize=serial)
    for v in range(vertices.shape[0]):
        vertices[v] = ti.cast(source[v], ti.f32)


@ti.func
def _refit_leaf(vertices: ti.template(), tree_faces: ti.template(), leaf_start: ti.template(),
                corner_packets: ti.template(), bound_packets: ti.template(), node_bound: ti.template(),
                first_leaf, width, k):
    """Leaf k: each triangle's corners from `vertices` into its slot of the leaf's packets, its disc
    bound (`_disc`), the leaf's box and normal sum; NaN in the slots past the leaf's count (never
    near); then the leaf's slab-cylinder about its box centre and mean plane, its corners gathered
    again (cheaper on the CPU than reading them back from the packets). A triangle at a time in
    scalars: on the CPU the fewest instructions per triangle (four slots at a time measured 1.5x
    slower, and as slow again without lane masks: docs/RESULTS.md)."""
    start, count, first = leaf_start[k], leaf_start[k + 1] - leaf_start[k], k * (width // 4)
    lo = ti.Vector([_INF, _INF, _INF], dt=ti.f32)
    hi = ti.Vector([-_INF, -_INF, -_INF], dt=ti.f32)
    normals = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
    for t in range(count):
        f = tree_faces[start + t]
        a, b, c = vertices[f[0]], vertices[f[1]], vertices[f[2]]
        packet, lane = first + (t >> 2), t & 3
        # lane by lane: a.x of slots 0..3, a.y, ... (CORNER_PACKET, BOUND_PACKET); each array's stores
        # together (a store may alias the arguments, so LLVM reloads the other array's pointer after it)
        for e in ti.static(range(3)):
            corner_packets[packet][4 * e + lane] = a[e]
            corner_packets[packet][4 * (3 + e) + lane] = b[e]
            corner_packets[packet][4 * (6 + e) + lane] = c[e]
        u, m, radius, slack, n = _disc(a, b, c)
        for e in ti.static(range(3)):
            bound_packets[packet][4 * e + lane] = u[e]
            bound_packets[packet][4 * (3 + e) + lane] = m[e]
        bound_packets[packet][24 + lane] = radius
        bound_packets[packet][28 + lane] = slack
        normals += n
        # this association compiles to minps/maxps; ((lo, a), b), c came out as compare-and-blend
        # chains from LLVM's SLP vectoriser, 0.12 ms more on the icosphere (docs/RESULTS.md)
        lo, hi = _min(_min(a, b), _min(lo, c)), _max(_max(a, b), _max(hi, c))
    for t in range(count, width):  # empty slots
        packet, lane = first + (t >> 2), t & 3
        for row in ti.static(range(CORNER_PACKET // 4)):
            corner_packets[packet][4 * row + lane] = _NAN
        for row in ti.static(range(BOUND_PACKET // 4)):
            bound_packets[packet][4 * row + lane] = _NAN
    axis = _unit(normals)  # the area-weighted normal: the mean plane
    centre = (lo + hi) * 0.5
    radius2 = 0.0
    thickness = 0.0
    for t in range(count):
        f = tree_faces[start + t]
        for corner in ti.static(range(3)):
            w = vertices[f[corner]] - centre
            radius2 = _max(w.dot(w), radius2)  # the 3D distance bounds the lateral one
            thickness = _max(ti.abs(axis.dot(w)), thickness)
    node_bound[first_leaf + k] = _bound_vector(lo, hi, axis, centre, ti.sqrt(radius2), thickness)


@ti.kernel
def refit_leaves(vertices: ti.types.ndarray(), tree_faces: ti.types.ndarray(),
                 leaf_start: ti.types.ndarray(), corner_packets: ti.types.ndarray(),
                 bound_packets: ti.types.ndarray(), node_bound: ti.types.ndarray(), nodes: ti.types.ndarray(),
                 first_leaf: ti.i32, width: ti.i32, levels: ti.i32, span: ti.i32, chunk: ti.i32, threads: ti.i32,
                 top_end: ti.i32):
    """Refit, first step, in groups of 4^levels consecutive leaves: each group's leaves
    (`_refit_leaf`), then its `levels` inner levels bottom-up in the same thread (the subtree
    the group's leaves make up), so the lowest inner levels cost no launch and no serial tail.
    The groups are spread over the threads (`spread_block`; span, chunk, threads from
    `engine.cpu_pool.loop_spread`). Then, in the same launch, inner nodes top_end - 1 .. 0
    serially, children before parents (`refit_level`'s serial case): a small tree's whole refit
    in one launch (the host passes top_end = the first node below them when no inner level above
    the groups is large enough to run in parallel, else 0)."""
    groups = (leaf_start.shape[0] - 1) >> (2 * levels)
    for j in range(span):
        group = spread_block(j, threads, chunk)
        if group < groups:
            for i in range(1 << (2 * levels)):
                _refit_leaf(vertices, tree_faces, leaf_start, corner_packets, bound_packets, node_bound,
                            first_leaf, width, (group << (2 * levels)) + i)
            level_begin = first_leaf
            for above in range(levels):  # the group's nodes one level up at a time: (level_begin - 1) / 4 starts it
                level_begin = (level_begin - 1) >> 2
                count = 1 << (2 * (levels - 1 - above))
                for i in range(count):
                    _refit_node(nodes, node_bound, level_begin + group * count + i)
    ti.loop_config(serialize=True)
    for j in range(top_end):
        _refit_node(nodes, node_bound, top_end - 1 - j)


@ti.kernel
def refit_level(nodes: ti.types.ndarray(), node_bound: ti.types.ndarray(), begin: ti.i32, end: ti.i32,
                serial: ti.template()):
    """Refit, inner nodes begin .. end - 1 bottom-up: each node's record from its children's
    bounds, then its own bound from its record. A level in parallel; or, with `serial`, the
    few nodes of the top levels in one loop from the last to the first, children before
    parents (waking the thread pool for each tiny level would cost more than its work)."""
    ti.loop_config(serialize=serial)
    for j in range(end - begin):
        _refit_node(nodes, node_bound, end - 1 - j)


@ti.kernel
def face_centroids(vertices: ti.types.ndarray(), faces: ti.types.ndarray(), order: ti.types.ndarray(),
                   centroids: ti.types.ndarray()):
    """The build's start: position t holds face t and its centroid (`split_level` permutes both)."""
    for t in range(faces.shape[0]):
        f = faces[t]
        order[t] = t
        centroids[t] = (vertices[f[0]] + vertices[f[1]] + vertices[f[2]]) * (1.0 / 3.0)


@ti.kernel
def sort_faces(faces: ti.types.ndarray(), order: ti.types.ndarray(), tree_faces: ti.types.ndarray()):
    """The faces in tree order, so that the refit reads them in sequence."""
    for t in range(order.shape[0]):
        tree_faces[t] = faces[order[t]]


@ti.func
def _key(centroids: ti.template(), i, axis):
    c = centroids[i]
    return ti.select(axis == 0, c[0], ti.select(axis == 1, c[1], c[2]))


@ti.func
def _swap(order: ti.template(), centroids: ti.template(), i, j):
    order[i], order[j] = order[j], order[i]
    centroids[i], centroids[j] = centroids[j], centroids[i]


@ti.kernel
def split_level(order: ti.types.ndarray(), centroids: ti.types.ndarray(), leaf_start: ti.types.ndarray(), level: ti.i32,
                levels: ti.i32, span: ti.i32, chunk: ti.i32, threads: ti.i32):
    """One binary level of the median split: every node's slots, sorted so far by the levels
    above, are partitioned about their median along the node's longest centroid axis.

    Binary node j of `level` owns leaf_start[j << (levels - level)] .. [(j + 1) << ...]: the
    same floor(j F / 2^level) boundaries as the 4-ary tree's leaves, two binary levels per
    4-ary level. Quickselect (Hoare partition, median-of-three pivot) in place, one thread
    per node, the nodes spread over the threads (`spread_block`; the upper levels have fewer
    nodes than Taichi's CPU backend gives one thread): deterministic, the whole level in O(F).
    """
    shift = levels - level
    for jj in range(span):
        j = spread_block(jj, threads, chunk)
        if j >= (1 << level):
            continue
        start, end = leaf_start[j << shift], leaf_start[(j + 1) << shift]
        mid = leaf_start[(2 * j + 1) << (shift - 1)]
        lo = ti.Vector([_INF, _INF, _INF], dt=ti.f32)
        hi = ti.Vector([-_INF, -_INF, -_INF], dt=ti.f32)
        for t in range(start, end):
            lo, hi = _min(lo, centroids[t]), _max(hi, centroids[t])
        extent = hi - lo
        axis = 0
        if extent[1] > extent[axis]:
            axis = 1
        if extent[2] > extent[axis]:
            axis = 2
        first, last = start, end - 1
        while first < last:
            a, b, c = _key(centroids, first, axis), _key(centroids, (first + last) // 2, axis), _key(centroids, last, axis)
            pivot = _max(_min(a, b), _min(_max(a, b), c))  # the median of the three
            i, k = first, last
            while i <= k:
                while _key(centroids, i, axis) < pivot:
                    i += 1
                while _key(centroids, k, axis) > pivot:
                    k -= 1
                if i <= k:
                    _swap(order, centroids, i, k)
                    i += 1
                    k -= 1
            if mid <= k:
                last = k
            elif mid >= i:
                first = i
            else:
                first = last  # slot mid holds the pivot: done


@ti.func
def _sorted4(d, c):
    """The four (distance, child) pairs in ascending distance (a five-comparator network)."""
    for i, j in ti.static(((0, 1), (2, 3), (0, 2), (1, 3), (1, 2))):
        swap = d[j] < d[i]
        di, dj, ci, cj = d[i], d[j], c[i], c[j]
        d[i], d[j] = ti.select(swap, dj, di), ti.select(swap, di, dj)
        c[i], c[j] = ti.select(swap, cj, ci), ti.select(swap, ci, cj)
    return d, c


@ti.func
def _search(p, corner_packets: ti.template(), bound_packets: ti.template(), leaf_start: ti.template(), width,
            nodes: ti.template(), order: ti.template(), depth, stack_size: ti.template(), hint_slot):
    """The closest point to p: (face or -1, barycentrics, point, squared distance, overflows).

    Best-first descent: at an inner node, the four children sorted by their lower bound;
    descend into the nearest, push the others that are closer than the best hit so far
    (farthest first), drop popped nodes that are no longer closer. At a leaf, four slots'
    disc bounds at a time, then the exact test of those closer than the best.
    A `hint_slot` >= 0 (a slot likely to hold the answer, e.g. last iteration's) is tested
    first: its distance is an upper bound from the start, so the descent pushes fewer nodes.
    Any real slot is a valid bound; the answer's distance is the same with or without it.
    """
    first_leaf = ((1 << (2 * depth)) - 1) // 3
    best = _INF
    best_slot = -1
    best_bary = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
    best_point = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
    if hint_slot >= 0:
        a, b, c = _slot_corners_at(corner_packets, hint_slot >> 2, hint_slot & 3)
        best_point, best_bary = closest_point_on_triangle(p, a, b, c)
        best, best_slot = (p - best_point).norm_sqr(), hint_slot
    stack_node = ti.Vector([0] * stack_size, dt=ti.i32)
    stack_dist = ti.Vector([0.0] * stack_size, dt=ti.f32)
    sp = 0
    overflows = 0  # counted locally, added once by the caller: an atomic inside this loop miscompiles on Vulkan
    node = 0
    node_dist = 0.0
    while True:
        descend = False
        if node_dist < best:
            if node < first_leaf:
                record = nodes[node]
                d = ti.Vector([0.0, 0.0, 0.0, 0.0], dt=ti.f32)
                for lane in ti.static(range(4)):
                    lo, hi, axis, centre, radius, thickness = _lane(record, lane)
                    d[lane] = _max(_box_distance2(p, lo, hi), _cylinder_distance2(
                        p, axis, centre, radius, thickness, SLACK * (radius * radius + thickness * thickness)))
                # the lanes by distance; each distance is read back by its lane (a dynamic index),
                # which keeps `d` in memory: LLVM then computes the four bounds in one vector
                _, lanes = _sorted4(d, ti.Vector([0, 1, 2, 3]))
                for rank in ti.static((3, 2, 1)):
                    dist = d[lanes[rank]]
                    if dist < best:
                        if sp < stack_size:
                            stack_node[sp] = 4 * node + 1 + lanes[rank]
                            stack_dist[sp] = dist
                            sp += 1
                        else:
                            overflows += 1
                dist = d[lanes[0]]
                if dist < best:
                    node, node_dist, descend = 4 * node + 1 + lanes[0], dist, True
            else:
                k = node - first_leaf
                for packet in range(width // 4):
                    index = k * (width // 4) + packet
                    bounds = bound_packets[index]
                    d = ti.Vector([0.0, 0.0, 0.0, 0.0], dt=ti.f32)
                    for lane in ti.static(range(4)):
                        d[lane] = _cylinder_distance2(
                            p, ti.Vector([bounds[lane], bounds[4 + lane], bounds[8 + lane]]),
                            ti.Vector([bounds[12 + lane], bounds[16 + lane], bounds[20 + lane]]),
                            bounds[24 + lane], 0.0, bounds[28 + lane])
                    for lane in range(4):  # a dynamic index: LLVM computes the four bounds in one vector
                        if d[lane] < best:
                            a, b, c = _slot_corners_at(corner_packets, index, lane)
                            point, bary = closest_point_on_triangle(p, a, b, c)
                            d2 = (p - point).norm_sqr()
                            if d2 < best:
                                best, best_slot, best_bary, best_point = d2, 4 * index + lane, bary, point
        if not descend:
            if sp == 0:
                break
            sp -= 1
            node, node_dist = stack_node[sp], stack_dist[sp]
    face = -1
    if best_slot >= 0:
        face = order[leaf_start[best_slot // width] + best_slot % width]
    return face, best_bary, best_point, best, overflows


@ti.func
def _query_one(i, points: ti.template(), perm: ti.template(), permuted, corner_packets: ti.template(),
               bound_packets: ti.template(), leaf_start: ti.template(), width, nodes: ti.template(),
               order: ti.template(), depth, out_face: ti.template(), out_bary: ti.template(),
               out_point: ti.template(), out_dist2: ti.template(), counts: ti.template(), stack_size: ti.template(),
               face_slot: ti.template(), warm: ti.template()):
    """The i-th search of `closest_point_query`, its answers written to the point's own index (with `warm`, over
    the earlier answer it starts from)."""
    q = i
    if permuted:
        q = perm[i]
    hint = -1
    if ti.static(warm):
        f = out_face[q]
        if 0 <= f < face_slot.shape[0]:
            hint = face_slot[f]
    face, bary, point, dist2, overflows = _search(points[q], corner_packets, bound_packets, leaf_start, width,
                                                  nodes, order, depth, stack_size, hint)
    if overflows > 0:
        ti.atomic_add(counts[OVERFLOWS], overflows)
    if face < 0:
        ti.atomic_add(counts[MISSES], 1)
    out_face[q] = face
    out_bary[q] = bary
    out_point[q] = point
    out_dist2[q] = dist2


@ti.kernel
def closest_point_query(points: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), n: ti.i32, block: ti.i32,
                        span: ti.i32, chunk: ti.i32, threads: ti.i32,
                        perm: ti.types.ndarray(dtype=ti.i32, ndim=1), permuted: ti.i32,
                        corner_packets: ti.types.ndarray(), bound_packets: ti.types.ndarray(),
                        leaf_start: ti.types.ndarray(),
                        width: ti.i32, nodes: ti.types.ndarray(), order: ti.types.ndarray(), depth: ti.i32,
                        out_face: ti.types.ndarray(dtype=ti.i32, ndim=1),
                        out_bary: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                        out_point: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                        out_dist2: ti.types.ndarray(dtype=ti.f32, ndim=1),
                        counts: ti.types.ndarray(dtype=ti.i32, ndim=1), stack_size: ti.template(),
                        serial: ti.template(), face_slot: ti.types.ndarray(dtype=ti.i32, ndim=1),
                        warm: ti.template()):
    """For each of the first n points: the closest triangle, its barycentrics, point and squared
    distance. With `permuted`, point perm[i] is the i-th one searched (a spatial order:
    consecutive searches then share the tree's cache lines); the answers go to each point's own
    index either way. A point with no hit (NaN input) gets face -1; misses and stack overflows
    are added to counts[MISSES], counts[OVERFLOWS]. Arrays only (numpy on the CPU without a
    copy), so the kernel compiles once per process whatever the mesh and the callers' fields.
    The points go in blocks of `block` consecutive ones (in search order), the blocks spread over
    the threads (`spread_block`; span, chunk, threads from `engine.cpu_pool.loop_spread`): on the
    CPU each thread takes every threads-th block, so a small batch uses every thread and a batch
    whose searches cost more in one part than another stays balanced. `serial` runs the loop on
    the launching thread: for a few points, waking the CPU backend's thread pool costs more
    (~10 us) than the searches. `warm`: out_face[q] holds an earlier answer for point q (any face index;
    one outside the mesh is no hint), whose slot (`face_slot`, from `slot_of_faces`) seeds its search
    (`_search`); the new answer is written over it."""
    ti.loop_config(serialize=serial)
    for j in range(span):
        first = spread_block(j, threads, chunk) * block
        for i in range(first, ti.min(first + block, n)):
            _query_one(i, points, perm, permuted, corner_packets, bound_packets, leaf_start, width, nodes, order,
                       depth, out_face, out_bary, out_point, out_dist2, counts, stack_size, face_slot, warm)


@ti.kernel
def gather_points(points: ti.template(), n: ti.i32, out: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                  serial: ti.template()):
    """The first n query points of a caller's field into the query's array; `serial` for a small
    batch, where waking the thread pool costs more than the copy."""
    ti.loop_config(serialize=serial)
    for q in range(n):
        out[q] = ti.cast(points[q], ti.f32)


@ti.kernel
def slot_of_faces(order: ti.types.ndarray(), leaf_start: ti.types.ndarray(), width: ti.i32,
                  face_slot: ti.types.ndarray()):
    """face_slot[f]: the slot that holds face f (leaf k's t-th face sits in slot k width + t)."""
    for k in range(leaf_start.shape[0] - 1):
        for t in range(leaf_start[k], leaf_start[k + 1]):
            face_slot[order[t]] = k * width + t - leaf_start[k]


@ti.kernel
def gather_faces(faces: ti.template(), n: ti.i32, out: ti.types.ndarray(dtype=ti.i32, ndim=1), serial: ti.template()):
    """A caller's faces (an earlier answer for the same points) into the query's array, where a warm search
    starts from them (`serial`: as `gather_points`)."""
    ti.loop_config(serialize=serial)
    for q in range(n):
        out[q] = faces[q]


@ti.kernel
def scatter_results(face: ti.types.ndarray(dtype=ti.i32, ndim=1), bary: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                    point: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                    dist2: ti.types.ndarray(dtype=ti.f32, ndim=1), n: ti.i32, out_face: ti.template(),
                    out_bary: ti.template(), out_point: ti.template(), out_dist2: ti.template(), serial: ti.template()):
    """The query's answers for the first n points into a caller's fields (`serial`: as `gather_points`)."""
    ti.loop_config(serialize=serial)
    for q in range(n):
        out_face[q] = face[q]
        out_bary[q] = bary[q]
        out_point[q] = point[q]
        out_dist2[q] = dist2[q]


@ti.kernel
def vectors_to_array(vectors: ti.types.ndarray(), out: ti.types.ndarray()):
    """An array of wide vectors (the packets, node records) into an (N, width) array, element by
    element: Taichi's own `to_numpy` unrolls a vector's elements and warns above 32 of them."""
    for i, k in ti.ndrange(out.shape[0], out.shape[1]):
        out[i, k] = vectors[i][k]


@ti.kernel
def brute_force_closest(points: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), n: ti.i32,
                        vertices: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                        faces: ti.types.ndarray(dtype=ti.types.vector(3, ti.i32), ndim=1),
                        out_face: ti.types.ndarray(dtype=ti.i32, ndim=1),
                        out_bary: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                        out_point: ti.types.ndarray(dtype=ti.math.vec3, ndim=1),
                        out_dist2: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    """The oracle: test every face for every point, same triangle function, same outputs."""
    for q in range(n):
        p = points[q]
        best = _INF
        best_face = -1
        best_bary = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
        best_point = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
        for f in range(faces.shape[0]):
            idx = faces[f]
            point, bary = closest_point_on_triangle(p, vertices[idx[0]], vertices[idx[1]], vertices[idx[2]])
            d2 = (p - point).norm_sqr()
            if d2 < best:
                best, best_face, best_bary, best_point = d2, f, bary, point
        out_face[q] = best_face
        out_bary[q] = best_bary
        out_point[q] = best_point
        out_dist2[q] = best
