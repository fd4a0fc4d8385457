"""Host glue for the affine acceptance: L = sum(a*x + b), forward and Taichi-autodiff backward."""
from __future__ import annotations

import numpy as np

from engine.autodiff.tape import Tape
from engine.fields import FieldGroup, taichi_float
from engine.kernels.elementwise import affine, sum_into
from engine.launch import launch

A, B = 2.0, 0.5  # y = A*x + B: the affine acceptance, and the first link of the tape chain (engine.checks.chain_problem)


class AffineProblem:
    """Fields for one affine problem of `n` elements in float32 or float64."""

    def __init__(self, n: int, dtype: np.dtype = np.float32, a: float = A, b: float = B):
        self.a, self.b = a, b
        self.group = FieldGroup()
        ti_dtype = taichi_float(dtype)
        self.x = self.group.field(ti_dtype, (n,), needs_grad=True)
        self.y = self.group.field(ti_dtype, (n,), needs_grad=True)
        self.loss = self.group.field(ti_dtype, (), needs_grad=True)
        self.group.finalize()

    def forward(self, x: np.ndarray) -> float:
        self.x.from_numpy(x)
        self.loss[None] = 0.0
        launch(affine, self.x, self.y, self.a, self.b)
        launch(sum_into, self.y, self.loss)
        return float(self.loss[None])

    def forward_backward(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """L and dL/dx: the forward taped, the backward by Taichi's generated adjoints in reverse."""
        tape = Tape()
        with tape:
            loss = self.forward(x)
        tape.backward(self.loss)
        grad = self.x.grad.to_numpy()
        tape.reset()
        return loss, grad


def run_affine(x: np.ndarray) -> dict[str, np.ndarray]:
    """Forward values, loss and gradient for `x` (a parity computation)."""
    problem = AffineProblem(x.size, x.dtype)
    loss, dx = problem.forward_backward(x)
    out = {"y": problem.y.to_numpy(), "loss": np.array(loss), "dx": dx}
    problem.group.destroy()
    return out


def run_affine_gradcheck(x: np.ndarray, eps: float = 1e-4) -> dict[str, np.ndarray]:
    """Analytic (autodiff) and central finite-difference gradients of L in float64."""
    from engine.autodiff.gradcheck import finite_difference_gradient

    problem = AffineProblem(x.size, np.float64)
    x64 = x.astype(np.float64)
    _, analytic = problem.forward_backward(x64)
    numeric = finite_difference_gradient(problem.forward, x64, eps)
    problem.group.destroy()
    return {"analytic": analytic, "numeric": numeric}
