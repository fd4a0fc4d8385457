"""Adam on the scene parameters theta with frozen groups and limits: the inverse render's update step.

    opt = ThetaAdam(renderer.theta, scene_theta.mask(("joints", "letter")), *scene_theta.limits(), lr=0.01)
    renderer.gradient_on_device()              # renderer.loss and renderer.theta.grad, on the device
    opt.step(renderer.loss)                     # guard, mask, Adam, clamp into [lo, hi], record: all on the device
    rows = opt.read()                           # (steps since the last read, 2 + N_THETA): one wait for them all
    opt.destroy()

Frozen components (mask 0) take no step; a step whose loss or gradient is not finite takes
none from its gradient either (it moves by Adam's momentum only, and its row says so); the
clamp projects each step back into the physical ranges (gripper opening, albedos, the sun
above the horizon). Each step records its loss, whether its gradient was discarded, and
theta after the step into a device array of `history` rows, which the host reads when it
needs them (issue 29: an iteration that never waits for the device). Kernels:
`engine.kernels.kinematics.mask_gradient` / `clamp_theta`; the optimiser: `engine.optim.Adam`.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.fields import FieldGroup
from engine.kernels.kinematics import N_THETA, clamp_theta, mask_gradient
from engine.launch import launch
from engine.optim import Adam

LOSS, DISCARDED, THETA = 0, 1, 2  # columns of a recorded row: the loss, 1 if the gradient was discarded, theta...


class ThetaAdam:
    """Masked, guarded, clamped Adam on a (N_THETA,) float32 field with needs_grad (see the module docstring).

    mask, lo, hi: (N_THETA,) arrays; lr: Adam's learning rate (the attribute `lr` may change between steps);
    history: the steps `step` may take between two `read`s."""

    def __init__(self, theta, mask: np.ndarray, lo: np.ndarray, hi: np.ndarray, lr: float, history: int = 1):
        self.theta = theta
        group = self.fields = FieldGroup()
        self.mask = group.field(ti.f32, (N_THETA,))
        self.lo = group.field(ti.f32, (N_THETA,))
        self.hi = group.field(ti.f32, (N_THETA,))
        self.iterates = group.field(ti.f64, (max(int(history), 1), THETA + N_THETA))
        group.finalize()
        for field, values in ((self.mask, mask), (self.lo, lo), (self.hi, hi)):
            field.from_numpy(np.asarray(values, np.float32))
        self.adam = Adam([theta], lr=lr)
        self.unread = 0  # steps since the last read: their rows are iterates[:unread]

    @property
    def lr(self) -> float:
        return self.adam.lr

    @lr.setter
    def lr(self, value: float) -> None:
        self.adam.lr = float(value)

    def step(self, loss) -> None:
        """One step from theta.grad, recording `loss` (a 0-d field: the loss that gradient is of); launches only."""
        if self.unread == self.iterates.shape[0]:
            raise RuntimeError(f"ThetaAdam: {self.unread} steps recorded since the last read(), room for "
                               f"{self.iterates.shape[0]}: read() first")
        launch(mask_gradient, self.theta, self.mask, loss, self.iterates, self.unread)
        self.adam.step()
        launch(clamp_theta, self.theta, self.lo, self.hi, self.iterates, self.unread)
        self.unread += 1

    def read(self) -> np.ndarray:
        """The rows of the steps since the last read, (steps, 2 + N_THETA) float64 (columns LOSS, DISCARDED, then
        theta after the step), in one wait for the device."""
        rows = self.iterates.to_numpy()[:self.unread] if self.unread else np.zeros((0, self.iterates.shape[1]))
        self.unread = 0
        return rows

    def destroy(self) -> None:
        self.adam.destroy()
        self.fields.destroy()
