"""Test scaffolding: the query's disc bound of one triangle per point, through the engine's functions.

A module of its own because Taichi reads kernel annotations as objects, which the test
modules' `from __future__ import annotations` would turn into strings.
"""
import taichi as ti

from engine.kernels.bvh_query import _cylinder_distance2, _disc


@ti.kernel
def disc_lower_bounds(p: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), t: ti.types.ndarray(dtype=ti.math.mat3, ndim=1),
                      out: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    """The query's disc bound of triangle t[i] (rows a, b, c) from point p[i] (test scaffolding
    around the engine's functions)."""
    for i in range(p.shape[0]):
        m = t[i]
        a = ti.Vector([m[0, 0], m[0, 1], m[0, 2]])
        b = ti.Vector([m[1, 0], m[1, 1], m[1, 2]])
        c = ti.Vector([m[2, 0], m[2, 1], m[2, 2]])
        u, centre, radius, slack, _ = _disc(a, b, c)
        out[i] = _cylinder_distance2(p[i], u, centre, radius, 0.0, slack)
