"""Host glue for the affine acceptance: L = sum(a*x + b), forward and Taichi-autodiff backward."""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.fields import FieldGroup
from engine.kernels.affine import affine, sum_into

A, B = 2.0, 0.5

_DTYPES = {np.dtype(np.float32): ti.f32, np.dtype(np.float64): ti.f64}


class AffineProblem:
    """Fields for one affine problem of `n` elements in float32 or float64."""

    def __init__(self, n: int, dtype: np.dtype = np.float32, a: float = A, b: float = B):
        self.a, self.b = a, b
        self.group = FieldGroup()
        ti_dtype = _DTYPES[np.dtype(dtype)]
        self.x = self.group.field(ti_dtype, (n,), needs_grad=True)
        self.y = self.group.field(ti_dtype, (n,), needs_grad=True)
        self.loss = self.group.field(ti_dtype, (), needs_grad=True)
        self.group.finalize()

    def forward(self, x: np.ndarray) -> float:
        self.x.from_numpy(x)
        self.loss[None] = 0.0
        affine(self.x, self.y, self.a, self.b)
        sum_into(self.y, self.loss)
        return float(self.loss[None])

    def backward(self) -> np.ndarray:
        """dL/dx by Taichi's reverse-mode autodiff, after `forward`."""
        for field in (self.x, self.y):
            field.grad.fill(0.0)
        self.loss.grad[None] = 1.0
        sum_into.grad(self.y, self.loss)
        affine.grad(self.x, self.y, self.a, self.b)
        return self.x.grad.to_numpy()


def run_affine(x: np.ndarray) -> dict[str, np.ndarray]:
    """Forward values, loss and gradient for `x` (a parity computation)."""
    problem = AffineProblem(x.size, x.dtype)
    loss = problem.forward(x)
    out = {"y": problem.y.to_numpy(), "loss": np.array(loss), "dx": problem.backward()}
    problem.group.destroy()
    return out


def run_affine_gradcheck(x: np.ndarray, eps: float = 1e-4) -> dict[str, np.ndarray]:
    """Analytic (autodiff) and central finite-difference gradients of L in float64."""
    from engine.autodiff.gradcheck import finite_difference_gradient

    problem = AffineProblem(x.size, np.float64)
    x64 = x.astype(np.float64)
    problem.forward(x64)
    analytic = problem.backward()
    numeric = finite_difference_gradient(problem.forward, x64, eps)
    problem.group.destroy()
    return {"analytic": analytic, "numeric": numeric}
