"""Device optimisers against float64 numpy references of the same updates, and the SGD oracle's theorem."""
import numpy as np
import pytest
import taichi as ti

from engine.autodiff.tape import Tape
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.kernels.losses import l2_loss
from engine.launch import launch
from engine.optim import SGD, Adam
from engine.checks.sgd_oracle_problem import oracle_problem, run_sgd_oracle

STEPS = 12
RNG = np.random.default_rng(7)
X0 = RNG.normal(size=(10, 3))
TARGET = RNG.normal(size=(10, 3))
SCALE = np.linspace(0.1, 4.0, 30).reshape(10, 3)  # uneven curvature so Adam's per-element scaling matters


def _quadratic(dtype, vector: bool):
    """L = 0.5 sum s (x - t)^2 through the l2_loss kernel on sqrt(s)-scaled copies: g = s (x - t)."""
    group = FieldGroup()
    make = (lambda grad: group.vector(3, dtype, (10,), needs_grad=grad)) if vector else \
        (lambda grad: group.field(dtype, (10, 3), needs_grad=grad))
    x, target = make(True), make(False)
    loss = group.field(ti.f64, (), needs_grad=True)
    group.finalize()
    x.from_numpy(X0)
    target.from_numpy(TARGET)
    return group, x, target, loss


def _run(optimiser_factory, dtype, vector: bool) -> list[np.ndarray]:
    group, x, target, loss = _quadratic(dtype, vector)
    optimiser = optimiser_factory([x])
    tape = Tape()
    trajectory = []
    for _ in range(STEPS):
        loss.fill(0)
        with tape:
            launch(l2_loss, x, target, loss)
        tape.backward(loss)
        optimiser.step()
        tape.reset()
        trajectory.append(x.to_numpy().reshape(10, 3).astype(np.float64))
    optimiser.destroy()
    group.destroy()
    return trajectory


def _numpy_sgd(lr: float, momentum: float) -> list[np.ndarray]:
    x, v, out = X0.copy(), np.zeros_like(X0), []
    for _ in range(STEPS):
        g = x - TARGET
        v = momentum * v + g
        x = x - lr * (v if momentum else g)
        out.append(x.copy())
    return out


def _numpy_adam(lr: float, b1: float, b2: float, eps: float) -> list[np.ndarray]:
    x, m, v, out = X0.copy(), np.zeros_like(X0), np.zeros_like(X0), []
    for t in range(1, STEPS + 1):
        g = x - TARGET
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        x = x - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        out.append(x.copy())
    return out


@pytest.mark.parametrize("vector", [True, False], ids=["vector-field", "scalar-field"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_numpy_float64(ti_cpu, momentum, vector):
    ours = _run(lambda p: SGD(p, lr=0.1, momentum=momentum), ti.f64, vector)
    for step, (a, b) in enumerate(zip(ours, _numpy_sgd(0.1, momentum))):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14, err_msg=f"step {step}")


@pytest.mark.parametrize("vector", [True, False], ids=["vector-field", "scalar-field"])
def test_adam_matches_numpy_float64(ti_cpu, vector):
    ours = _run(lambda p: Adam(p, lr=0.05, betas=(0.9, 0.99), eps=1e-8), ti.f64, vector)
    for step, (a, b) in enumerate(zip(ours, _numpy_adam(0.05, 0.9, 0.99, 1e-8))):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13, err_msg=f"step {step}")


def test_float32_adam_tracks_the_float64_reference(ti_cpu):
    ours = _run(lambda p: Adam(p, lr=0.05), ti.f32, True)
    reference = _numpy_adam(0.05, 0.9, 0.999, 1e-8)
    assert np.abs(ours[-1] - reference[-1]).max() < 1e-5


def test_state_is_per_optimiser_and_freed(ti_cpu):
    group, x, _, _ = _quadratic(ti.f32, True)
    adam = Adam([x], lr=0.1)
    moments = adam._state.fields
    assert [f.shape for f in moments[0] + moments[1]] == [(10,), (10,)] and moments[0][0].n == 3
    adam.destroy()
    group.destroy()


def test_bad_hyperparameters_are_user_errors(ti_cpu):
    group, x, target, _ = _quadratic(ti.f32, True)
    with pytest.raises(UserError, match="optimiser lr must be > 0, got -1"):
        SGD([x], lr=-1)
    with pytest.raises(UserError, match="optimiser momentum must be >= 0 and < 1, got 1"):
        SGD([x], lr=0.1, momentum=1.0)
    with pytest.raises(UserError, match="optimiser beta2 must be >= 0 and < 1"):
        Adam([x], betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="parameter 0 must be a Taichi field allocated with needs_grad=True"):
        Adam([target])
    group.destroy()


def test_sgd_oracle_follows_the_theorem_on_the_cpu(ti_cpu):
    x0, target = oracle_problem()
    assert x0.shape == (642, 3) and x0.dtype == np.float32
    out = run_sgd_oracle(x0, target, lr=0.05, steps=60)
    losses = out["losses"]
    expected = 0.5 * np.sum((x0 - target).astype(np.float64) ** 2)  # f32 differences, squared and summed in f64
    assert abs(losses[0] / expected - 1) < 1e-14
    np.testing.assert_allclose(losses[1:] / losses[:-1], 0.95 ** 2, rtol=1e-5)  # far from the round-off floor
    assert int(out["tape_entries"]) == 0  # reset after every iteration
