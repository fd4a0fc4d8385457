"""Test scaffolding: the query's disc bound of one triangle per point, through the engine's functions.

A module of its own because Taichi reads kernel annotations as objects, which the test
modules' `from __future__ import annotations` would turn into strings.
"""
import taichi as ti

from engine.kernels.bvh_query import CORNER_PACKET, _cylinder_distance2, _packet_bounds


@ti.kernel
def disc_lower_bounds(p: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), t: ti.types.ndarray(dtype=ti.math.mat3, ndim=1),
                      out: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    """The query's disc bound of triangle t[i] (rows a, b, c) from point p[i] (test scaffolding
    around the engine's functions)."""
    for i in range(p.shape[0]):
        m = t[i]
        corners = ti.Vector([0.0] * CORNER_PACKET, dt=ti.f32)  # the triangle in all four slots
        for row in ti.static(range(9)):
            for lane in ti.static(range(4)):
                corners[4 * row + lane] = m[row // 3, row % 3]
        bound = _packet_bounds(corners)[0]
        out[i] = _cylinder_distance2(p[i], ti.Vector([bound[0], bound[4], bound[8]]),
                                     ti.Vector([bound[12], bound[16], bound[20]]), bound[24], 0.0, bound[28])
