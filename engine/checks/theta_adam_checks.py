"""The computation "theta_adam_steps": `engine.theta_adam.ThetaAdam` stepped from given gradients and losses on
this backend, its recorded rows read back in one wait (tests/test_theta_adam.py checks them against Adam in float64
numpy, on cpu and vulkan: the mask, the clamp, and a loss or gradient that is not finite)."""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.fields import FieldGroup
from engine.kernels.kinematics import N_THETA
from engine.theta_adam import ThetaAdam


def run_theta_adam_steps(theta: np.ndarray, grads: np.ndarray, losses: np.ndarray, mask: np.ndarray,
                         lo: np.ndarray, hi: np.ndarray, lr: float) -> dict:
    """theta (N_THETA,); grads (steps, N_THETA); losses (steps,): the gradient and loss each step sees. Returns
    "rows" (steps, 2 + N_THETA): ThetaAdam.read() after all the steps; "theta": the final theta."""
    group = FieldGroup()
    field = group.field(ti.f32, (N_THETA,), needs_grad=True)
    loss = group.field(ti.f64, ())
    group.finalize()
    opt = ThetaAdam(field, mask, lo, hi, lr, history=len(grads))
    try:
        field.from_numpy(np.asarray(theta, np.float32))
        for grad, value in zip(grads, losses):
            field.grad.from_numpy(np.asarray(grad, np.float32))
            loss[None] = float(value)
            opt.step(loss)
        return {"rows": opt.read(), "theta": field.to_numpy().astype(np.float64)}
    finally:
        opt.destroy()
        group.destroy()
