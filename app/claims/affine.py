"""Claim `affine`: y = 2x + 0.5 over 1024 float32 elements, L = sum(y).

Forward equals the analytic values on both backends; Taichi's backward gives
dL/dx = 2 on both; central finite differences in float64 confirm it.
"""
from __future__ import annotations

import numpy as np

from engine import computations
from engine.checks.affine_problem import A, B
from engine.autodiff.gradcheck import compare_gradients
from engine.parity import compare

N = 1024


def run(ctx) -> None:
    a_name, b_name = ctx.arch, ctx.parity_arch
    x = np.random.default_rng(0).uniform(-4.0, 4.0, N).astype(np.float32)
    analytic_y = (np.float32(A) * x + np.float32(B)).astype(np.float32)

    out_a = computations.run("affine", x=x)
    out_b = ctx.parity.call("affine", x=x)

    fwd_a, fwd_b = compare(out_a["y"], analytic_y, 0.0), compare(out_b["y"], analytic_y, 0.0)
    fwd_ab = compare(out_a["y"], out_b["y"], 0.0)
    ctx.metric(forward_max_abs_err=max(fwd_a.max_abs_err, fwd_b.max_abs_err, fwd_ab.max_abs_err))
    ctx.check(fwd_a.passed() and fwd_b.passed() and fwd_ab.passed(),
              f"forward: {a_name} == {b_name} == analytic ({N} elements)")

    two = np.full(N, A, np.float32)
    bwd_a, bwd_b = compare(out_a["dx"], two, 0.0), compare(out_b["dx"], two, 0.0)
    ctx.metric(backward_max_abs_err=max(bwd_a.max_abs_err, bwd_b.max_abs_err))
    ctx.check(bwd_a.passed() and bwd_b.passed(), f"backward: {a_name} == {b_name} == {A:g} (analytic)")

    grads = computations.run("affine_gradcheck", x=x)
    report = compare_gradients(grads["analytic"], grads["numeric"], atol=1e-7, rtol=1e-7)
    ctx.metric(gradcheck_max_rel_err=report.max_rel_err)
    ctx.check(report.passed, "gradcheck: analytic gradient confirmed by finite differences")
