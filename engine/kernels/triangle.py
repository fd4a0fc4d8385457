"""Point-triangle closest point: the one definition every query (BVH, brute force, Chamfer) uses.

`closest_point_on_triangle(p, a, b, c) -> (point, bary)` is Ericson's region-based
test (Real-Time Collision Detection, 5.1.5): it finds which Voronoi region of the
triangle (3 vertices, 3 edges, the face) holds `p` with dot products only, and
returns the closest point and its barycentric weights (u, v, w), point = u*a + v*b + w*c,
u + v + w = 1, all >= 0. Degenerate triangles (zero-length edges, zero area) never
divide by zero: the guarded divisions fall back to a vertex or an edge.
"""
import taichi as ti


@ti.func
def _ratio(num, den):
    # num / den where the region test guarantees 0 <= num <= den; den == 0 only for a
    # degenerate edge, where any point of it (here the first end) is the closest.
    r = num * 0.0
    if den > 0.0:
        r = num / den
    return r


@ti.func
def closest_point_on_triangle(p, a, b, c):
    """Closest point of triangle (a, b, c) to p and its barycentrics (see module docstring)."""
    ab = b - a
    ac = c - a
    ap = p - a
    d1 = ab.dot(ap)
    d2 = ac.dot(ap)
    zero = d1 * 0.0
    one = zero + 1.0
    bary = ti.Vector([one, zero, zero])  # vertex region A
    if d1 > 0.0 or d2 > 0.0:
        bp = p - b
        d3 = ab.dot(bp)
        d4 = ac.dot(bp)
        if d3 >= 0.0 and d4 <= d3:
            bary = ti.Vector([zero, one, zero])  # vertex region B
        else:
            vc = d1 * d4 - d3 * d2
            if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
                v = _ratio(d1, d1 - d3)  # edge AB
                bary = ti.Vector([one - v, v, zero])
            else:
                cp = p - c
                d5 = ab.dot(cp)
                d6 = ac.dot(cp)
                if d6 >= 0.0 and d5 <= d6:
                    bary = ti.Vector([zero, zero, one])  # vertex region C
                else:
                    vb = d5 * d2 - d1 * d6
                    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
                        w = _ratio(d2, d2 - d6)  # edge AC
                        bary = ti.Vector([one - w, zero, w])
                    else:
                        va = d3 * d6 - d5 * d4
                        if va <= 0.0 and d4 - d3 >= 0.0 and d5 - d6 >= 0.0:
                            w = _ratio(d4 - d3, (d4 - d3) + (d5 - d6))  # edge BC
                            bary = ti.Vector([zero, one - w, w])
                        else:
                            total = va + vb + vc  # face region: > 0 unless the triangle is degenerate
                            if total > 0.0:
                                v = vb / total
                                w = vc / total
                                bary = ti.Vector([one - v - w, v, w])
    point = a + ab * bary[1] + ac * bary[2]
    return point, bary
