"""Gradchecks of the hand-written adjoints and of the device kinematics, runnable on any backend.

Each check runs a kernel forward on this process's backend, seeds its outputs' gradients
with fixed weights, runs the adjoint the tape would run (the declared custom adjoint, or
Taichi's for the kinematics), and returns the forward values and the analytic gradient
together with float64 central differences of a numpy reference of the same forward
(`reference_*` below). The forward values are compared with the reference too, so the
differences are of the function the device computes. Vulkan has no float64 exp/log/sin/cos
(SPIR-V's GLSL.std.450), so the kernels run in float32 there and in float64 elsewhere.

Named computations (engine.computations): "adjoint_checks" (broadcast_rows, sum_into,
image_loss_terms L2 and L1, soft_min_layers) and "kinematics_check".
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.autodiff.custom import adjoint_of
from engine import taichi_private
from engine.autodiff.gradcheck import finite_difference_gradient
from engine.fields import FieldGroup
from engine.kernels import image_loss
from engine.kernels import kinematics
from engine.kernels import reduce
from engine.kernels import softmin
from engine.launch import dispatch

ROWS, COLS, N_PX, K = 7, 5, 6, 2


def _dtype() -> tuple:
    return (ti.f32, np.float32) if taichi_private.arch() == ti.vulkan else (ti.f64, np.float64)


def reference_soft_min(ratio: np.ndarray, colour: np.ndarray, active: np.ndarray, kappa: float) -> tuple:
    """numpy soft_min_layers: ratio (K, P), colour (K, P, 3), active (K, P) -> soft ratio (P,), colour (P, 3)."""
    r = np.where(active, ratio, softmin.INACTIVE_RATIO)
    m = r.min(axis=0)
    e = np.exp(-kappa * (r - m))
    w = e / e.sum(axis=0)
    return m - np.log(e.sum(axis=0)) / kappa, (w[..., None] * np.where(active[..., None], colour, 0.0)).sum(axis=0)


def reference_image_loss(image: np.ndarray, target: np.ndarray, weight: np.ndarray, kind: int) -> np.ndarray:
    d = image - target
    return weight * (0.5 * (d * d).sum(-1) if kind == image_loss.L2 else np.abs(d).sum(-1))


def _run_adjoint(kernel, args) -> None:
    dispatch(adjoint_of(kernel), args)


def run_adjoint_checks(seed: int = 0) -> dict:
    """Forward values, analytic gradients and reference central differences of every declared adjoint."""
    tdt, ndt = _dtype()
    rng = np.random.default_rng(seed)
    eps = 1e-6 if ndt == np.float64 else 1e-3
    out: dict[str, np.ndarray] = {}
    g = FieldGroup()
    src = g.field(tdt, (COLS,), needs_grad=True)
    dst = g.field(tdt, (ROWS, COLS), needs_grad=True)
    partial = g.field(tdt, (1, COLS))
    rows = g.field(ti.i32, ())  # broadcast_rows reads its row count on the device
    values = g.field(tdt, (ROWS,), needs_grad=True)
    vpartial = g.field(tdt, (1,))
    total = g.field(tdt, (), needs_grad=True)
    image = g.vector(3, tdt, (N_PX,), needs_grad=True)
    target = g.vector(3, tdt, (N_PX,))
    weight = g.field(tdt, (N_PX,))
    terms = g.field(tdt, (N_PX,), needs_grad=True)
    dloss = g.vector(3, tdt, (N_PX,))
    ratio = g.field(tdt, ((K + 1) * N_PX,), needs_grad=True)
    colour = g.vector(3, tdt, ((K + 1) * N_PX,), needs_grad=True)
    active = g.field(ti.i32, ((K + 1) * N_PX,))
    soft_ratio = g.field(tdt, (N_PX,), needs_grad=True)
    soft_colour = g.vector(3, tdt, (N_PX,), needs_grad=True)
    w_soft = g.field(tdt, (N_PX, K))
    g.finalize()
    try:
        # broadcast_rows: L = sum W * dst, so dL/dsrc[j] = sum_i W[i, j] (a fixed-order sum)
        s0 = rng.normal(size=COLS)
        wts = rng.normal(size=(ROWS, COLS))
        src.from_numpy(s0.astype(ndt))
        rows[None] = ROWS
        dispatch(reduce.broadcast_rows, (src, rows, dst, partial))
        dst.grad.from_numpy(wts.astype(ndt))
        src.grad.fill(0)
        _run_adjoint(reduce.broadcast_rows, (src, rows, dst, partial))
        out["broadcast_value"] = dst.to_numpy().astype(np.float64) - np.broadcast_to(s0, (ROWS, COLS))
        out["broadcast_grad"] = src.grad.to_numpy().astype(np.float64)
        out["broadcast_fd"] = finite_difference_gradient(lambda x: float((wts * x[None, :]).sum()), s0, eps)

        # sum_into: total = 0.5 * sum(values)
        v0 = rng.normal(size=ROWS)
        values.from_numpy(v0.astype(ndt))
        total.fill(0)
        dispatch(reduce.sum_into, (values, ROWS, 0.5, vpartial, total))
        total.grad.fill(1.0)
        values.grad.fill(0)
        _run_adjoint(reduce.sum_into, (values, ROWS, 0.5, vpartial, total))
        out["sum_value"] = np.array([float(total[None]) - 0.5 * v0.sum()])
        out["sum_grad"] = values.grad.to_numpy().astype(np.float64)
        out["sum_fd"] = finite_difference_gradient(lambda x: 0.5 * float(x.sum()), v0, eps)

        # image_loss_terms, L2 and L1: L = sum c * terms
        im0, tg0 = rng.uniform(0.1, 0.9, (N_PX, 3)), rng.uniform(0.1, 0.9, (N_PX, 3))
        wt0, c = rng.uniform(0.0, 1.0, N_PX), rng.normal(size=N_PX)
        image.from_numpy(im0.astype(ndt))
        target.from_numpy(tg0.astype(ndt))
        weight.from_numpy(wt0.astype(ndt))
        for name, kind in image_loss.LOSS_KINDS.items():
            dispatch(image_loss.image_loss_terms, (image, target, weight, 0, N_PX, kind, terms, dloss))
            terms.grad.from_numpy(c.astype(ndt))
            image.grad.fill(0)
            _run_adjoint(image_loss.image_loss_terms, (image, target, weight, 0, N_PX, kind, terms, dloss))
            out[f"loss_{name}_value"] = terms.to_numpy().astype(np.float64) - reference_image_loss(im0, tg0, wt0, kind)
            out[f"loss_{name}_grad"] = image.grad.to_numpy().astype(np.float64)
            out[f"loss_{name}_fd"] = finite_difference_gradient(
                lambda x: float((c * reference_image_loss(x, tg0, wt0, kind)).sum()), im0, eps)

        # soft_min_layers (kappa 8, layers 1..K; layer 0 unused), L = sum a * r + sum b . c
        kappa = 8.0
        r0 = rng.uniform(0.0, 1.0, (K + 1, N_PX))
        r0[1:, 0] = [0.3, 0.3 + 1e-3]  # a near tie
        c0 = rng.uniform(0.0, 1.0, (K + 1, N_PX, 3))
        act = np.ones((K + 1, N_PX), np.int32)
        act[2, 1] = 0  # one pixel with a single edge layer
        a, b = rng.normal(size=N_PX), rng.normal(size=(N_PX, 3))
        ratio.from_numpy(r0.reshape(-1).astype(ndt))
        colour.from_numpy(c0.reshape(-1, 3).astype(ndt))
        active.from_numpy(act.reshape(-1))
        args = (ratio, colour, active, N_PX, kappa, soft_ratio, soft_colour, w_soft)
        dispatch(softmin.soft_min_layers, args)
        soft_ratio.grad.from_numpy(a.astype(ndt))
        soft_colour.grad.from_numpy(b.astype(ndt))
        ratio.grad.fill(0)
        colour.grad.fill(0)
        _run_adjoint(softmin.soft_min_layers, args)
        ref_r, ref_c = reference_soft_min(r0[1:], c0[1:], act[1:] != 0, kappa)
        out["softmin_value"] = np.concatenate([soft_ratio.to_numpy() - ref_r, (soft_colour.to_numpy() - ref_c).ravel()])

        def softmin_loss(x: np.ndarray) -> float:
            rr = x[:(K + 1) * N_PX].reshape(K + 1, N_PX)[1:]
            cc = x[(K + 1) * N_PX:].reshape(K + 1, N_PX, 3)[1:]
            sr, sc = reference_soft_min(rr, cc, act[1:] != 0, kappa)
            return float((a * sr).sum() + (b * sc).sum())

        x0 = np.concatenate([r0.ravel(), c0.ravel()])
        grad = np.concatenate([ratio.grad.to_numpy().astype(np.float64).ravel(),
                               colour.grad.to_numpy().astype(np.float64).ravel()])
        out["softmin_grad"] = grad
        out["softmin_fd"] = finite_difference_gradient(softmin_loss, x0, eps)
    finally:
        g.destroy()
    return out


def run_soft_min_stability(kappa: float = 1e4) -> dict:
    """soft_min_layers at sharpness `kappa` on ratios from 0 to INACTIVE_RATIO and exact ties (float32)."""
    ratios = np.array([[0.0, 1e-7, 0.5, 3.0, 1e3, 1e5, 0.25],
                       [1e6, 1e-7, 0.5 + 1e-6, 3.0, 2.0, 1e5, 0.25]], np.float64)
    n = ratios.shape[1]
    g = FieldGroup()
    ratio = g.field(ti.f32, (3 * n,), needs_grad=True)
    colour = g.vector(3, ti.f32, (3 * n,), needs_grad=True)
    active = g.field(ti.i32, (3 * n,))
    soft_ratio = g.field(ti.f32, (n,), needs_grad=True)
    soft_colour = g.vector(3, ti.f32, (n,), needs_grad=True)
    weight = g.field(ti.f32, (n, 2))
    g.finalize()
    try:
        ratio.from_numpy(np.concatenate([np.zeros(n), ratios.ravel()]).astype(np.float32))
        colour.from_numpy(np.ones((3 * n, 3), np.float32))
        active.fill(1)
        args = (ratio, colour, active, n, kappa, soft_ratio, soft_colour, weight)
        dispatch(softmin.soft_min_layers, args)
        soft_ratio.grad.fill(1.0)
        soft_colour.grad.fill(1.0)
        _run_adjoint(softmin.soft_min_layers, args)
        return {"ratios": ratios, "soft_ratio": soft_ratio.to_numpy(), "weight": weight.to_numpy(),
                "ratio_grad": ratio.grad.to_numpy()[n:].reshape(2, n)}
    finally:
        g.destroy()


def run_kinematics_check(theta: np.ndarray, weights: np.ndarray) -> dict:
    """The device kinematics at theta (float32 on every backend, as the renderer runs it) and
    d(weights . prm)/d theta by Taichi's adjoint; the caller compares with the host's float64 packing."""
    g = FieldGroup()
    th = g.field(ti.f32, (kinematics.N_THETA,), needs_grad=True)
    prm = g.field(ti.f32, (len(weights),), needs_grad=True)
    g.finalize()
    try:
        th.from_numpy(np.asarray(theta, np.float32))
        prm.fill(0)
        dispatch(kinematics.kinematics, (th, prm))
        prm.grad.from_numpy(np.asarray(weights, np.float32))
        th.grad.fill(0)
        dispatch(kinematics.kinematics.grad, (th, prm))
        return {"prm": prm.to_numpy().astype(np.float64), "grad": th.grad.to_numpy().astype(np.float64)}
    finally:
        g.destroy()
