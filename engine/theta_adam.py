"""Adam on the scene parameters theta with frozen groups and limits: the inverse render's update step.

    opt = ThetaAdam(renderer.theta, scene_theta.mask(("joints", "letter")), *scene_theta.limits(), lr=0.01)
    loss, grad = renderer.loss_and_gradient()  # fills renderer.theta.grad
    opt.step()                                  # grad *= mask, Adam, theta clamped into [lo, hi]: all on the device
    opt.destroy()

Frozen components (mask 0) take no step; the clamp projects each step back into the
physical ranges (gripper opening, albedos, the sun above the horizon). Kernels:
`engine.kernels.kinematics.mask_gradient` / `clamp_theta`; the optimiser:
`engine.optim.Adam`.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.fields import FieldGroup
from engine.kernels.kinematics import N_THETA, clamp_theta, mask_gradient
from engine.launch import launch
from engine.optim import Adam


class ThetaAdam:
    """Masked, clamped Adam on a (N_THETA,) float32 field with needs_grad (see the module docstring).

    mask, lo, hi: (N_THETA,) arrays; lr: Adam's learning rate (the attribute `lr` may change between steps)."""

    def __init__(self, theta, mask: np.ndarray, lo: np.ndarray, hi: np.ndarray, lr: float):
        self.theta = theta
        group = self.fields = FieldGroup()
        self.mask = group.field(ti.f32, (N_THETA,))
        self.lo = group.field(ti.f32, (N_THETA,))
        self.hi = group.field(ti.f32, (N_THETA,))
        group.finalize()
        for field, values in ((self.mask, mask), (self.lo, lo), (self.hi, hi)):
            field.from_numpy(np.asarray(values, np.float32))
        self.adam = Adam([theta], lr=lr)

    @property
    def lr(self) -> float:
        return self.adam.lr

    @lr.setter
    def lr(self, value: float) -> None:
        self.adam.lr = float(value)

    def discard_gradient(self) -> None:
        """Zero theta's gradient (a non-finite one): the next step moves only by Adam's momentum."""
        self.theta.grad.fill(0.0)

    def step(self) -> None:
        launch(mask_gradient, self.theta, self.mask)
        self.adam.step()
        launch(clamp_theta, self.theta, self.lo, self.hi)

    def destroy(self) -> None:
        self.adam.destroy()
        self.fields.destroy()
