"""Claim `real_mesh_fit`: the icosphere (subdivision 4, 2,562 vertices) shrink-wraps onto each
real target (spot, blub, penguin) with Chamfer + Adam (lr 0.03) and a Laplacian step after every
update whose size falls linearly from 0.8 to 0.1, 400 iterations: the loss falls by >= 2.5 orders
on each, with no query misses.

lr and the smoothing schedule were chosen by measurement (docs/RESULTS.md): against lr 0.01 and a
constant lambda 0.2 they gain ~1-1.8 orders and cut the tented share of the fitted surface
(farther than 0.05 from the target) on blub from 12 % to under 1 %. The fitted meshes are written
to the output folder to look at.
"""
from __future__ import annotations

import time

from app.scenes.fit_settings import (RECOMMENDED_ITERS, RECOMMENDED_LR, RECOMMENDED_SMOOTH, RECOMMENDED_SMOOTH_END,
                                     REAL_TARGETS)
from app.scenes.shape_fit import ShapeFit

SUBDIV = 4
LR, SMOOTH, SMOOTH_END, ITERS = RECOMMENDED_LR, RECOMMENDED_SMOOTH, RECOMMENDED_SMOOTH_END, RECOMMENDED_ITERS
MIN_ORDERS = 2.5


def run(ctx) -> None:
    for name in REAL_TARGETS:
        fit = ShapeFit(name, SUBDIV, LR, SMOOTH, smooth_end=SMOOTH_END, schedule_iters=ITERS)
        started = time.perf_counter()
        for _ in range(ITERS):
            fit.step()
        wall = time.perf_counter() - started
        orders, misses = fit.orders(), fit.misses()
        fit.export_mesh(ctx.out / f"fit_{name}.obj")
        fit.destroy()
        ctx.metric(**{f"orders_{name}": round(orders, 4), f"wall_s_{name}": round(wall, 3)})
        ctx.check(orders >= MIN_ORDERS and misses == 0,
                  f"{name}: {ITERS} iterations (subdiv {SUBDIV}, smooth {SMOOTH} -> {SMOOTH_END}), loss {fit.losses[0]:.3e} -> "
                  f"{fit.losses[-1]:.3e}, {orders:.2f} orders (>= {MIN_ORDERS}), {misses} misses")
