"""Host glue for the SGD oracle: L = 0.5 ||x - x*||^2 over icosphere vertices, plain SGD on the device.

The gradient of L is x - x*, so one SGD step x <- x - lr (x - x*) scales the residual by
(1 - lr) and the loss by exactly (1 - lr)^2 (0.9025 for lr = 0.05): the run can be
checked step by step against the theorem. Parameters are float32 (as in a real fit);
the loss is accumulated in float64 (see engine.kernels.losses) so that the measured
ratios show the parameters' round-off, not the reduction's.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.autodiff.tape import Tape
from engine.fields import FieldGroup
from engine.kernels.losses import l2_loss, record_loss
from engine.launch import launch
from engine.meshgen import icosphere
from engine.optim import SGD

LR = 0.05
STEPS = 200
SUBDIV = 3  # 642 vertices


def oracle_problem() -> tuple[np.ndarray, np.ndarray]:
    """Start (unit icosphere, 642 x 3) and target (a smooth, non-uniform displacement of it), float32."""
    vertices, _ = icosphere(SUBDIV)
    x, y, z = vertices.T
    bump = 1.0 + 0.12 * np.sin(3.0 * x) * np.cos(2.0 * y) + 0.08 * z
    target = vertices * bump[:, None] + np.array([0.05, -0.03, 0.02])
    return vertices.astype(np.float32), target.astype(np.float32)


def run_sgd_oracle(x0: np.ndarray, target: np.ndarray, lr: float = LR, steps: int = STEPS) -> dict[str, np.ndarray]:
    """Run `steps` SGD iterations on the device; return the loss before each step and the final x."""
    group = FieldGroup()
    x = group.vector(3, ti.f32, (len(x0),), needs_grad=True)
    goal = group.vector(3, ti.f32, (len(x0),))
    loss = group.field(ti.f64, (), needs_grad=True)
    history = group.field(ti.f64, (steps,))
    group.finalize()
    x.from_numpy(x0.astype(np.float32))
    goal.from_numpy(target.astype(np.float32))
    optimiser = SGD([x], lr=lr)
    tape = Tape()
    for step in range(steps):
        loss.fill(0.0)
        with tape:
            launch(l2_loss, x, goal, loss)
        tape.backward(loss)
        launch(record_loss, loss, history, step)
        optimiser.step()
        tape.reset()
    out = {"losses": history.to_numpy(), "x": x.to_numpy(), "tape_entries": np.array(len(tape.entries))}
    group.destroy()
    return out


def ratio_noise(losses: np.ndarray, target: np.ndarray, lr: float = LR) -> np.ndarray:
    """Predicted rms float32 round-off in each step's loss ratio, relative (one value per step).

    Near convergence x ~ x*, and each update x - lr (x - x*) is rounded to the float32
    spacing u_i of x*_i: an error e_i uniform in [-u_i/2, u_i/2] on the residual d_i.
    Then L' = (1 - lr)^2 L + (1 - lr) d.e + O(e^2), and d.e has rms |d| u_rms / sqrt(12)
    with |d| = sqrt(2 L), so the relative ratio error has rms
    sqrt(2) u_rms / (sqrt(12) (1 - lr) sqrt(L)).
    """
    spacing = np.spacing(np.abs(np.asarray(target, np.float32))).astype(np.float64)
    u_rms = float(np.sqrt(np.mean(spacing ** 2)))
    return np.sqrt(2.0) * u_rms / (np.sqrt(12.0) * (1.0 - lr) * np.sqrt(losses[:-1]))
