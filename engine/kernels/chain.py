"""The tape chain oracle's middle link: z = sin(y), elementwise.

The chain is `affine` (engine.kernels.affine: y = 2x + 0.5) -> `sin_map` -> `sum_into`
(engine.kernels.affine), so dL/dx = 2 cos(2x + 0.5).
"""
import taichi as ti


@ti.kernel
def sin_map(y: ti.template(), z: ti.template()):
    for i in y:
        z[i] = ti.sin(y[i])
