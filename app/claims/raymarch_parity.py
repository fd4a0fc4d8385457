"""Claim `raymarch_parity`: the robot-arm frame at t = 0.5, 2048x1024, on both backends.

Goal (beyond the reference prototype's 99.88 %): at least 99.95 % of pixels within
1e-4 on every channel of linear RGB, and no pixel off by more than 5e-2. Writes both
renders and a diff heatmap (log scale over the data's range, a colour bar under it with 1e-4 marked).
Records the warm frame time of backend A (second render in this process).
"""
from __future__ import annotations

import numpy as np

from app.claims.thresholds import PIXEL_ATOL as ATOL
from app.claims.thresholds import PIXEL_MAX_ERR as MAX_ERR
from app.claims.thresholds import PIXEL_MIN_SHARE as MIN_SHARE
from engine import computations, image_io

T, WIDTH, HEIGHT = 0.5, 2048, 1024


def pixel_parity(a: np.ndarray, b: np.ndarray, atol: float = ATOL) -> tuple[float, float, np.ndarray]:
    """Share of pixels whose every channel is within atol, the max error, and the per-pixel error."""
    err = np.abs(a.astype(np.float64) - b.astype(np.float64)).max(axis=-1)
    err[~np.isfinite(err)] = np.inf
    return float(np.count_nonzero(err <= atol) / err.size), float(err.max()), err


def run(ctx, t: float = T, width: int = WIDTH, height: int = HEIGHT) -> None:
    inputs = {"t": t, "width": width, "height": height}
    out_a = computations.run("raymarch_frame", **inputs)  # its ms is the warm render time (see raymarch_frame)
    out_b = ctx.parity.call("raymarch_frame", **inputs)
    a, b = out_a["rgb"], out_b["rgb"]
    share, max_err, err = pixel_parity(a, b)
    image_io.write_linear_png(ctx.out / f"raymarch_{ctx.arch}.png", a)
    image_io.write_linear_png(ctx.out / f"raymarch_{ctx.parity_arch}.png", b)
    err = image_io.pixel_error(a, b)
    log_range = image_io.diff_log_range(err, ATOL)
    image_io.write_png(ctx.out / "raymarch_diff.png", image_io.with_legend(image_io.error_heatmap(err, log_range),
                                                                           image_io.diff_legend(log_range, ATOL)))
    bad = np.argwhere(err > ATOL)
    ctx.metric(**{"width": width, "height": height, "share_within_1e-4": share, "max_abs_err": max_err,
                  "ms_per_frame": round(float(out_a["ms"]), 1), "pixels_outside_1e-4": int(len(bad)),
                  "bitwise_equal_share": float(np.count_nonzero(err == 0.0) / err.size)})
    ctx.check(np.isfinite(a).all() and np.isfinite(b).all() and a.std() > 0.05,
              f"raymarch: {width}x{height} frame at t={t:g} rendered on {ctx.arch} and {ctx.parity_arch} (finite, not blank)")
    ctx.check(share >= MIN_SHARE, f"raymarch parity: {share * 100:.4f}% of pixels within {ATOL:g} "
                                  f"({ctx.arch} vs {ctx.parity_arch}; goal >= {MIN_SHARE * 100:g}%)")
    ctx.check(max_err <= MAX_ERR, f"raymarch parity: max abs error {max_err:.3g} (goal <= {MAX_ERR:g}), "
                                  f"{len(bad)} pixel(s) outside {ATOL:g}; diff heatmap in raymarch_diff.png")
    print(f"  warm frame on {ctx.arch}: {float(out_a['ms']):.0f} ms", flush=True)
