"""engine.theta_adam: the inverse render's Adam step on the device (mask, a gradient that is not finite, clamp, the
recorded rows the host reads in one wait) against Adam in float64 numpy, on cpu and vulkan."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.kernels.kinematics import N_THETA
from engine.theta_adam import DISCARDED, LOSS, THETA
from tests.conftest import OTHER_ARCHS, backend_worker

LR, BETA1, BETA2, EPS = 0.05, 0.9, 0.999, 1e-8


def _call(arch: str, **inputs) -> dict:
    if arch == "cpu":
        from engine import backend, computations

        backend.init("cpu")
        return computations.run("theta_adam_steps", **inputs)
    return backend_worker(arch).call("theta_adam_steps", **inputs)


def _reference(theta, grads, losses, mask, lo, hi):
    """Adam as `engine.optim.Adam` takes it (PyTorch's), in float64: a step whose loss or gradient is not finite
    uses a zero gradient (its momentum still moves theta); frozen components take no step; then the clamp."""
    theta, m, v, rows = np.array(theta, np.float64), np.zeros(N_THETA), np.zeros(N_THETA), []
    for t, (grad, loss) in enumerate(zip(grads, losses), start=1):
        finite = math.isfinite(loss) and np.all(np.isfinite(grad))
        g = np.where(finite, np.nan_to_num(grad) * mask, 0.0)
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        theta = theta - LR * (m / (1 - BETA1 ** t)) / (np.sqrt(v / (1 - BETA2 ** t)) + EPS)
        theta = np.clip(theta, lo, hi)
        rows.append([loss, 0.0 if finite else 1.0, *theta])
    return np.array(rows), theta


@pytest.mark.parametrize("arch", ["cpu", *OTHER_ARCHS])
def test_steps_on_the_device_match_adam_and_discard_a_gradient_that_is_not_finite(arch):
    rng = np.random.default_rng(3)
    steps = 6
    theta = rng.uniform(-0.5, 0.5, N_THETA)
    grads = rng.normal(size=(steps, N_THETA))
    losses = rng.uniform(0.1, 1.0, steps)
    grads[2, 4] = np.nan  # a gradient component that is NaN,
    losses[3] = np.inf  # a loss that overflowed,
    grads[4, 7] = -np.inf  # a gradient component that overflowed
    mask = np.ones(N_THETA)
    mask[[1, 9]] = 0.0  # frozen
    lo, hi = np.full(N_THETA, -0.6), np.full(N_THETA, 0.6)
    lo[0] = theta[0] - 0.01  # a bound the steps reach
    out = _call(arch, theta=theta, grads=grads, losses=losses, mask=mask, lo=lo, hi=hi, lr=LR)
    rows, final = out["rows"], out["theta"]
    ref_rows, ref_theta = _reference(theta.astype(np.float32), grads, losses, mask, lo.astype(np.float32),
                                     hi.astype(np.float32))
    assert rows.shape == (steps, THETA + N_THETA)
    assert rows[:, DISCARDED].tolist() == [0, 0, 1, 1, 1, 0]
    assert np.array_equal(rows[:, LOSS], losses.astype(np.float64))  # the loss as given, not a float32 copy
    assert np.allclose(rows[:, THETA:], ref_rows[:, THETA:], atol=2e-6, rtol=0)  # float32 Adam against float64
    assert np.array_equal(rows[-1, THETA:], final)  # the last row is theta after the last step
    assert np.array_equal(final[[1, 9]], theta.astype(np.float32)[[1, 9]].astype(np.float64))  # frozen
    assert final[0] == np.float32(lo[0])  # clamped at its bound
    assert np.allclose(final, ref_theta, atol=2e-6, rtol=0)


def test_more_steps_than_the_history_holds_is_refused_until_read(ti_cpu):
    import taichi as ti

    from engine.fields import FieldGroup
    from engine.theta_adam import ThetaAdam

    group = FieldGroup()
    theta = group.field(ti.f32, (N_THETA,), needs_grad=True)
    loss = group.field(ti.f64, ())
    group.finalize()
    opt = ThetaAdam(theta, np.ones(N_THETA), np.full(N_THETA, -1.0), np.full(N_THETA, 1.0), lr=0.1, history=2)
    try:
        opt.step(loss)
        opt.step(loss)
        with pytest.raises(RuntimeError, match="read"):
            opt.step(loss)
        assert len(opt.read()) == 2 and len(opt.read()) == 0
        opt.step(loss)
        assert len(opt.read()) == 1
    finally:
        opt.destroy()
        group.destroy()
