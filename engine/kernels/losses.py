"""Loss kernels.

`l2_loss`: loss += 0.5 * sum |x - target|^2 over every element of two fields of the
same shape (scalar or vector fields). The sum accumulates in the precision of `loss`.
With an f64 loss over f32 parameters each term is formed exactly (x - target is exact
in f32 when the two are within a factor of two of each other, as they are near
convergence, and its square is exact in f64), so the total does not depend on the
order in which threads add to ~1e-16 relative. An f32 total of 1926 terms would carry
~1e-7..1e-6 relative noise that changes with the summation order from run to run.
"""
import taichi as ti

from engine.taichi_private import MatrixField


@ti.kernel
def l2_loss(x: ti.template(), target: ti.template(), loss: ti.template()):
    for I in ti.grouped(x):
        d = ti.cast(x[I] - target[I], loss.dtype)
        if ti.static(isinstance(x, MatrixField)):
            loss[None] += 0.5 * d.dot(d)
        else:
            loss[None] += 0.5 * d * d


@ti.kernel
def record_loss(loss: ti.template(), history: ti.template(), step: ti.i32):
    # Keeps the loss curve on the device: the host reads the whole history once, at the end.
    history[step] = loss[None]
