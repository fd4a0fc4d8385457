"""Host glue for the tape chain oracle: L = sum(sin(2x + 0.5)), taped, so dL/dx = 2 cos(2x + 0.5).

Three kernels (engine.kernels.elementwise.affine -> engine.kernels.elementwise.sin_map ->
engine.kernels.elementwise.sum_into) recorded on an engine.autodiff.tape.Tape.
"""
from __future__ import annotations

import numpy as np

from engine.checks.affine_problem import A, B
from engine.autodiff.gradcheck import gradcheck
from engine.autodiff.tape import Tape
from engine.fields import FieldGroup, taichi_float
from engine.kernels.elementwise import affine, sin_map, sum_into
from engine.launch import launch


class ChainProblem:
    """Fields for one chain of `n` elements in float32 or float64."""

    def __init__(self, n: int, dtype: np.dtype = np.float32):
        ti_dtype = taichi_float(dtype)
        self.group = FieldGroup()
        self.x, self.y, self.z = (self.group.field(ti_dtype, (n,), needs_grad=True) for _ in range(3))
        self.loss = self.group.field(ti_dtype, (), needs_grad=True)
        self.group.finalize()

    def forward(self) -> None:
        """Launch the three kernels (recorded when a tape is active)."""
        self.loss.fill(0.0)
        launch(affine, self.x, self.y, A, B)
        launch(sin_map, self.y, self.z)
        launch(sum_into, self.z, self.loss)


def run_tape_chain(x: np.ndarray) -> dict[str, np.ndarray]:
    """Loss and taped gradient dL/dx for `x` (a parity computation)."""
    problem = ChainProblem(x.size, x.dtype)
    problem.x.from_numpy(x)
    tape = Tape()
    with tape:
        problem.forward()
    tape.backward(problem.loss)
    out = {"loss": np.array(problem.loss[None]), "dx": problem.x.grad.to_numpy(),
           "launches": np.array([entry.name for entry in tape.entries])}
    problem.group.destroy()
    return out


def run_tape_chain_gradcheck(x: np.ndarray, eps: float = 1e-6) -> dict[str, np.ndarray]:
    """gradcheck of the chain in float64: max abs/rel error and the worst element."""
    problem = ChainProblem(x.size, np.float64)
    problem.x.from_numpy(x.astype(np.float64))
    report = gradcheck(problem.forward, [problem.x], problem.loss, eps=eps, atol=1e-8, rtol=1e-7)
    problem.group.destroy()
    return {"max_abs_err": np.array(report.max_abs_err), "max_rel_err": np.array(report.max_rel_err),
            "worst_index": np.array(report.worst_index), "passed": np.array(report.passed)}
