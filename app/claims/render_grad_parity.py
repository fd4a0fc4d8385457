"""Claim `render_grad_parity`: the render gradient on two backends, at the same theta and target.

Both backends evaluate the computation "render_gradient" (engine.diff_render.run_render_gradient)
for one theta (the timeline's frame at T, moved off it) against one target image (rendered
on backend A), at 128x64 over the whole image, silhouettes included. Goal (the brief's):
max |g_A - g_B| <= 1e-3 max |g_A|. The march's last-bit differences between LLVM and
SPIR-V move held points by ~1e-7, so the gradients differ at that level, not more.
"""
from __future__ import annotations

import numpy as np

from engine import computations

T, WIDTH, HEIGHT = 0.1, 128, 64
RTOL = 1e-3


def run(ctx) -> None:
    from app.claims.render_gradcheck import OFFSET
    from app.scenes.invert import render_target
    from app.scenes.robot_arm import theta_at

    truth = theta_at(T)
    target = render_target(truth, WIDTH, HEIGHT)
    inputs = {"theta": truth + OFFSET, "target": target, "weight": np.ones((HEIGHT, WIDTH), np.float32),
              "width": WIDTH, "height": HEIGHT}
    a = computations.run("render_gradient", **inputs)
    b = ctx.parity.call("render_gradient", **inputs)
    scale = float(np.abs(a["grad"]).max())
    err = float(np.abs(a["grad"] - b["grad"]).max())
    image_err = float(np.abs(a["image"] - b["image"]).max())
    ctx.metric(width=WIDTH, height=HEIGHT, max_abs_grad_diff=err, max_abs_grad=scale, rel=err / scale,
               loss_a=float(a["loss"]), loss_b=float(b["loss"]), image_max_abs_diff=image_err)
    ctx.check(np.isfinite(a["grad"]).all() and np.isfinite(b["grad"]).all() and scale > 0.0,
              f"render gradient on {ctx.arch} and {ctx.parity_arch}: finite, non-zero")
    ctx.check(err <= RTOL * scale, f"render gradient parity {ctx.arch} vs {ctx.parity_arch}: max |gA - gB| = "
                                   f"{err / scale:.2e} of max |gA| (goal <= {RTOL:g}); images differ by at most "
                                   f"{image_err:.1e}")
