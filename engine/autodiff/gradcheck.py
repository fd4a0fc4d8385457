"""Finite-difference gradient checks in float64."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


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


def compare_gradients(analytic: np.ndarray, numeric: np.ndarray, atol: float = 1e-6, rtol: float = 1e-5) -> GradcheckReport:
    """Elementwise |analytic - numeric| <= atol + rtol * |numeric|, with the worst element."""
    analytic = np.asarray(analytic, dtype=np.float64)
    numeric = np.asarray(numeric, dtype=np.float64)
    err = np.abs(analytic - numeric)
    rel = err / np.maximum(np.abs(numeric), 1e-300)
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
    ok = bool(np.all(np.isfinite(err)) and np.all(err <= atol + rtol * np.abs(numeric)))
    return GradcheckReport(float(err.max(initial=0.0)), float(rel.max(initial=0.0)), tuple(int(i) for i in worst), ok)
