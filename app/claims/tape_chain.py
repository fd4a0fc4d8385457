"""Claim `tape_chain`: affine (2x + 0.5) -> sin_map -> sum, taped; dL/dx = 2 cos(2x + 0.5).

Three kernels recorded on the tape, replayed in reverse on both backends (float32,
1024 elements): the gradient equals the analytic one within 1e-5 on each, the two
backends agree within 1e-6 (a few float32 ulps: their `cos` differ in the last bit),
and a float64 gradcheck (central differences) confirms the taped gradient.
"""
from __future__ import annotations

import numpy as np

from engine import computations
from engine.parity import compare

N = 1024
TOL = 1e-5  # float32 gradient vs the float64 analytic value
PARITY_TOL = 1e-6
LAUNCHES = ["affine", "sin_map", "sum_into"]


def run(ctx) -> None:
    a_name, b_name = ctx.arch, ctx.parity_arch
    x = np.random.default_rng(0).uniform(-4.0, 4.0, N).astype(np.float32)
    analytic = 2.0 * np.cos(2.0 * x.astype(np.float64) + 0.5)

    out_a = computations.run("tape_chain", x=x)
    out_b = ctx.parity.call("tape_chain", x=x)
    ctx.check(list(out_a["launches"]) == LAUNCHES and list(out_b["launches"]) == LAUNCHES,
              f"tape recorded {' -> '.join(LAUNCHES)} on {a_name} and {b_name}")

    err_a, err_b = compare(out_a["dx"], analytic, TOL), compare(out_b["dx"], analytic, TOL)
    ctx.metric(max_abs_err=max(err_a.max_abs_err, err_b.max_abs_err))
    ctx.check(err_a.passed(), f"backward on {a_name}: dL/dx == 2cos(2x+0.5) within {TOL:g} "
                              f"(max abs err {err_a.max_abs_err:.2e}, {N} elements)")
    ctx.check(err_b.passed(), f"backward on {b_name}: dL/dx == 2cos(2x+0.5) within {TOL:g} "
                              f"(max abs err {err_b.max_abs_err:.2e})")

    parity = compare(out_a["dx"], out_b["dx"], PARITY_TOL)
    ctx.metric(parity_max_abs_err=parity.max_abs_err)
    ctx.check(parity.passed(), f"parity: {a_name} == {b_name} within {PARITY_TOL:g} ({parity.summary()})")

    # SPIR-V (GLSL.std.450) has no float64 sin: the float64 gradcheck runs on an LLVM backend of the two.
    on_b = ctx.arch == "vulkan"
    check = (ctx.parity.call if on_b else computations.run)("tape_chain_gradcheck", x=x[:128])
    ctx.check(bool(check["passed"]), f"gradcheck on {b_name if on_b else a_name} (float64 central differences, "
                                     f"128 elements): max abs err {float(check['max_abs_err']):.1e}")
