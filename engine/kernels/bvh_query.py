"""Triangle BVH on the device: refit, closest-point query, and the brute-force oracle.

Tree layout (built on the host by `engine.triangle_bvh`): an implicit complete binary tree of
`depth` levels below the root, every leaf at the same depth. Node i has children
2i+1 and 2i+2 (no child pointers); nodes of level d are [2^d - 1, 2^(d+1) - 1);
leaf k is node 2^depth - 1 + k and owns triangle slots [leaf_start[k], leaf_start[k+1]).
`boxes[i]` is node i's box as a 6-vector (lo.xyz, hi.xyz), so a node's two children
are 48 adjacent bytes. `tris[t]` holds slot t's three corners (a.xyz, b.xyz, c.xyz),
gathered in leaf order by `refit` so a leaf's triangles are contiguous, and
`spheres[t]` a sphere around them (centroid, radius): in a leaf, a triangle whose
sphere lies farther than the best hit so far is skipped without the full
point-triangle test (measured: -15 to -25 % query time). `order[t]` is the original
face index of slot t.

Stack bound (why overflow cannot happen): the query descends into the nearer child
and pushes at most the farther one per internal level, so the stack never holds more
than `depth` entries; the host refuses trees deeper than STACK_SIZE (tests pass a
smaller `stack_size` to exercise the guard). The kernel still counts any push that
would not fit (`counters[1]`) rather than trust the proof silently; the host raises.

These kernels use `while`/`break`, which Taichi's reverse-mode AD rejects: run them
untaped; gradients come from the envelope theorem on the returned face and barycentrics.
"""
import taichi as ti

from engine.kernels.triangle import closest_point_on_triangle

STACK_SIZE = 32  # default entries per query thread; >= depth is enough (see module docstring)
SERIAL_LEVELS = 6  # refit: levels above this one (63 nodes) are refitted by one thread
MISSES, OVERFLOWS = 0, 1  # indices into the counters field
_INF = float("inf")


@ti.func
def _corners(tri):
    return (ti.Vector([tri[0], tri[1], tri[2]]), ti.Vector([tri[3], tri[4], tri[5]]),
            ti.Vector([tri[6], tri[7], tri[8]]))


@ti.func
def box_distance2(p, box):
    """Squared distance from p to the box (lo.xyz, hi.xyz); 0 inside."""
    lo = ti.Vector([box[0], box[1], box[2]])
    hi = ti.Vector([box[3], box[4], box[5]])
    d = ti.max(ti.max(lo - p, p - hi), 0.0)
    return d.dot(d)


@ti.func
def _union(a, b):
    return ti.Vector([ti.min(a[0], b[0]), ti.min(a[1], b[1]), ti.min(a[2], b[2]),
                      ti.max(a[3], b[3]), ti.max(a[4], b[4]), ti.max(a[5], b[5])])


@ti.kernel
def refit(vertices: ti.template(), faces: ti.template(), order: ti.template(), leaf_start: ti.template(),
          tris: ti.template(), spheres: ti.template(), boxes: ti.template(), depth: ti.template()):
    """Gather triangles into leaf order and recompute every bound bottom-up from `vertices`.

    One parallel loop over leaves (corners, bounding spheres, leaf boxes), then one
    parallel loop per level up to level SERIAL_LEVELS (the static loop unrolls into
    sequential loops), then the top levels serially: one launch in all. min/max are
    exact, so the boxes are the same whatever the thread schedule.
    """
    first_leaf = (1 << depth) - 1
    for k in range(1 << depth):
        box = ti.Vector([_INF, _INF, _INF, -_INF, -_INF, -_INF], dt=ti.f32)
        for t in range(leaf_start[k], leaf_start[k + 1]):
            f = faces[order[t]]
            a, b, c = vertices[f[0]], vertices[f[1]], vertices[f[2]]
            tris[t] = ti.Vector([a[0], a[1], a[2], b[0], b[1], b[2], c[0], c[1], c[2]])
            centre = (a + b + c) / 3.0
            radius = ti.sqrt(ti.max(ti.max((a - centre).norm_sqr(), (b - centre).norm_sqr()), (c - centre).norm_sqr()))
            spheres[t] = ti.Vector([centre[0], centre[1], centre[2], radius * (1.0 + 1e-6)])
            lo = ti.min(ti.min(a, b), c)
            hi = ti.max(ti.max(a, b), c)
            box = _union(box, ti.Vector([lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]]))
        boxes[first_leaf + k] = box
    for level in ti.static(range(depth - 1, SERIAL_LEVELS - 1, -1)):
        for i in range((1 << level) - 1, (1 << (level + 1)) - 1):
            boxes[i] = _union(boxes[2 * i + 1], boxes[2 * i + 2])
    # the top levels (< 2^SERIAL_LEVELS nodes) in one serial loop, children before parents:
    # a parallel loop per tiny level would cost a task launch each for a few nodes
    top = ti.static((1 << min(depth, SERIAL_LEVELS)) - 1)  # nodes in the top levels
    ti.loop_config(serialize=True)
    for j in range(top):
        i = top - 1 - j
        boxes[i] = _union(boxes[2 * i + 1], boxes[2 * i + 2])


@ti.kernel
def closest_point_query(points: ti.template(), n: ti.i32, tris: ti.template(), spheres: ti.template(),
                        order: ti.template(), leaf_start: ti.template(), boxes: ti.template(), depth: ti.template(),
                        out_face: ti.template(), out_bary: ti.template(), out_point: ti.template(),
                        out_dist2: ti.template(), counters: ti.template(), stack_size: ti.template()):
    """For each of the first n points: the closest triangle, its barycentrics, point and squared distance.

    Best-first descent: visit the nearer child first, push the farther one only if its
    box is closer than the best hit so far, and drop popped nodes that are no longer
    closer (the early exit). A point with no hit (NaN input) gets face -1 and counts
    as a miss.
    """
    first_leaf = (1 << depth) - 1
    for q in range(n):
        p = points[q]
        best = _INF
        best_dist = _INF
        best_slot = -1
        best_bary = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
        best_point = ti.Vector([0.0, 0.0, 0.0], dt=ti.f32)
        stack_node = ti.Vector([0] * stack_size, dt=ti.i32)
        stack_dist = ti.Vector([0.0] * stack_size, dt=ti.f32)
        sp = 0
        overflows = 0  # counted locally, added once: an atomic inside this loop miscompiles on Vulkan
        node = 0
        node_dist = box_distance2(p, boxes[0])
        while True:
            if node_dist < best and node < first_leaf:
                left = 2 * node + 1
                d_left = box_distance2(p, boxes[left])
                d_right = box_distance2(p, boxes[left + 1])
                near, far, d_near, d_far = left, left + 1, d_left, d_right
                if d_right < d_left:
                    near, far, d_near, d_far = left + 1, left, d_right, d_left
                if d_far < best:
                    if sp < stack_size:
                        stack_node[sp] = far
                        stack_dist[sp] = d_far
                        sp += 1
                    else:
                        overflows += 1
                node, node_dist = near, d_near
            else:
                if node_dist < best:  # a leaf worth testing
                    k = node - first_leaf
                    for t in range(leaf_start[k], leaf_start[k + 1]):
                        sphere = spheres[t]
                        reach = best_dist + sphere[3]
                        if (p - ti.Vector([sphere[0], sphere[1], sphere[2]])).norm_sqr() < reach * reach:
                            a, b, c = _corners(tris[t])
                            point, bary = closest_point_on_triangle(p, a, b, c)
                            d2 = (p - point).norm_sqr()
                            if d2 < best:
                                best, best_slot, best_bary, best_point = d2, t, bary, point
                                best_dist = ti.sqrt(d2)
                if sp == 0:
                    break
                sp -= 1
                node, node_dist = stack_node[sp], stack_dist[sp]
        if overflows > 0:
            ti.atomic_add(counters[OVERFLOWS], overflows)
        face = -1
        if best_slot >= 0:
            face = order[best_slot]
        else:
            ti.atomic_add(counters[MISSES], 1)
        out_face[q] = face
        out_bary[q] = best_bary
        out_point[q] = best_point
        out_dist2[q] = best


@ti.kernel
def brute_force_closest(points: ti.template(), n: ti.i32, vertices: ti.template(), faces: ti.template(),
                        out_face: ti.template(), out_bary: ti.template(), out_point: ti.template(),
                        out_dist2: ti.template()):
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
