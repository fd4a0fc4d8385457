"""Finite-difference gradient checks in float64.

`finite_difference_gradient` and `compare_gradients` work on host functions and arrays;
`gradcheck` checks the taped gradient of any function of one or more fields.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import taichi as ti

from engine.autodiff.tape import Tape


def finite_difference_gradient(loss: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences (L(x + eps e_i) - L(x - eps e_i)) / 2 eps for every element of x."""
    x = np.array(x, dtype=np.float64)
    grad = np.empty_like(x)
    flat, grad_flat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        original = flat[i]
        flat[i] = original + eps
        plus = loss(x)
        flat[i] = original - eps
        minus = loss(x)
        flat[i] = original
        grad_flat[i] = (plus - minus) / (2.0 * eps)
    return grad


@dataclass(frozen=True)
class GradcheckReport:
    max_abs_err: float
    max_rel_err: float
    worst_index: tuple[int, ...]
    passed: bool
    worst_input: int = 0  # which input holds the worst element (gradcheck of several inputs)


def compare_gradients(analytic: np.ndarray, numeric: np.ndarray, atol: float = 1e-6, rtol: float = 1e-5) -> GradcheckReport:
    """Elementwise |analytic - numeric| <= atol + rtol * |numeric|, with the worst element."""
    analytic = np.asarray(analytic, dtype=np.float64)
    numeric = np.asarray(numeric, dtype=np.float64)
    err = np.abs(analytic - numeric)
    rel = err / np.maximum(np.abs(numeric), 1e-300)
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
    ok = bool(np.all(np.isfinite(err)) and np.all(err <= atol + rtol * np.abs(numeric)))
    return GradcheckReport(float(err.max(initial=0.0)), float(rel.max(initial=0.0)), tuple(int(i) for i in worst), ok)


def gradcheck(forward: Callable[[], None], inputs: Sequence[Any], loss: Any, eps: float = 1e-6,
              atol: float = 1e-6, rtol: float = 1e-5) -> GradcheckReport:
    """Check the taped gradient of `loss` with respect to `inputs` by central differences.

    `forward()` must launch (through engine.launch) the kernels that compute `loss` from
    the `inputs` from scratch, zeroing its accumulators itself, so that it can be rerun.
    Every input and the loss must be float64 fields: instantiate the same kernels on f64
    fields (every backend here has f64) so that differences of size `eps` are exact
    enough to test against. The report's worst element is `worst_index` of input
    number `worst_input`.

        report = gradcheck(lambda: chain.forward(), [chain.x], chain.loss)
        assert report.passed, report
    """
    for name, field in [(f"input {i}", f) for i, f in enumerate(inputs)] + [("loss", loss)]:
        if getattr(field, "dtype", None) != ti.f64:
            raise ValueError(f"gradcheck: {name} is {getattr(field, 'dtype', type(field).__name__)}, not f64; "
                             f"instantiate the same kernels on float64 fields")
    tape = Tape()
    with tape:
        forward()
    tape.zero_grad()
    for field in inputs:
        field.grad.fill(0)
    tape.backward(loss)
    analytic = [field.grad.to_numpy() for field in inputs]
    tape.reset()

    def loss_at(field: Any) -> Callable[[np.ndarray], float]:
        def evaluate(values: np.ndarray) -> float:
            field.from_numpy(values)
            forward()
            return float(np.sum(loss.to_numpy()))
        return evaluate

    reports = []
    for field, grad in zip(inputs, analytic):
        original = field.to_numpy()
        reports.append(compare_gradients(grad, finite_difference_gradient(loss_at(field), original, eps), atol, rtol))
        field.from_numpy(original)
    forward()  # leave the fields as the caller's inputs define them
    worst = max(range(len(reports)), key=lambda i: reports[i].max_abs_err)
    return replace(reports[worst], max_rel_err=max(r.max_rel_err for r in reports),
                   passed=all(r.passed for r in reports), worst_input=worst)
