"""Elementwise maps and the sum: y = a*x + b, z = sin(y), total += sum(values).

The affine acceptance is `affine` -> `sum_into`; the tape-chain oracle is `affine` ->
`sin_map` -> `sum_into`, so dL/dx = 2 cos(2x + 0.5). Taichi generates every adjoint.
"""
import taichi as ti


@ti.kernel
def affine(x: ti.template(), y: ti.template(), a: ti.f64, b: ti.f64):
    # a and b arrive as f64 and are cast to the field's precision, so an f32 run rounds
    # once (like numpy's float32 a*x + b) and an f64 run (gradcheck) keeps every digit.
    for i in x:
        y[i] = ti.cast(a, x.dtype) * x[i] + ti.cast(b, x.dtype)


@ti.kernel
def sum_into(values: ti.template(), total: ti.template()):
    for i in values:
        total[None] += values[i]


@ti.kernel
def sin_map(y: ti.template(), z: ti.template()):
    for i in y:
        z[i] = ti.sin(y[i])
