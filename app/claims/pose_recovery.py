"""Claim `pose_recovery`: recover the arm's pose and the letter's from a seeded perturbation.

Target: the differentiable render of the timeline's frame at T (the arm against the floor,
the fallen letter on the table), 256x128, cpu (or whatever backend A is). Start: every
joint moved by 15..20 degrees (engine.scene_theta.perturb: at least 3/4 of the
magnitude, random sign), the gripper by up to 0.03 m, the letter tile by up to 0.2 in
position and 10 degrees in yaw and tilt, seeded. `python -m app invert`'s fit: its multi-start
(`app.scenes.invert.pick_start`, DEFAULT_STARTS starts spread over the base yaw, START_ITERATIONS
iterations each; the lowest image loss continues) and then `InverseRender` with its default schedule.
Goals (the issue's): joints within 0.5 degrees, the letter within 0.01 units, the plain image loss
(against the seeded start's) down >= 3 orders. The wall time (short runs included) is recorded.
Without the multi-start seeds 3 and 5 do not recover (docs/RESULTS.md has the table per seed).
"""
from __future__ import annotations

import math
import time

import numpy as np

from engine import scene_theta

T, WIDTH, HEIGHT, SEED = 0.1, 256, 128, 2  # docs/RESULTS.md: the recovery per seed
PERTURB = {"joints": 20.0, "gripper": 0.03, "letter": 0.2, "letter_angles": 10.0}
JOINT_TOL_DEG, LETTER_TOL, MIN_ORDERS = 0.5, 0.01, 3.0


def run(ctx) -> None:
    from app.scenes.invert import (DEFAULT_STARTS, START_ITERATIONS, InverseRender, InvertSettings, pick_start,
                                   render_target, side_by_side)
    from app.scenes.robot_arm import theta_at
    from engine.image_io import write_png
    from engine.render import Camera

    truth = theta_at(T)
    target = render_target(truth, WIDTH, HEIGHT)
    start = scene_theta.perturb(truth, PERTURB, SEED)
    started = time.perf_counter()
    settings = InvertSettings(groups=tuple(PERTURB))
    fit_start, multistart = pick_start(target, start, truth, WIDTH, HEIGHT, Camera(), settings, DEFAULT_STARTS,
                                       START_ITERATIONS)
    inv = InverseRender(target, fit_start, truth, WIDTH, HEIGHT, settings=settings)
    start_loss = inv.image_loss(start)
    for _ in range(settings.iterations):
        inv.step()
    wall = time.perf_counter() - started
    final = inv.theta()
    final_loss = inv.image_loss()
    orders = math.log10(start_loss / final_loss) if final_loss > 0 else float("inf")
    start_err, final_err = scene_theta.group_errors(start, truth), scene_theta.group_errors(final, truth)
    joint_start = np.degrees(np.abs(start - truth)[scene_theta.GROUPS["joints"]])
    write_png(ctx.out / "pose_recovery.png", side_by_side(inv.current_image(), target))
    ctx.metric(t=T, width=WIDTH, height=HEIGHT, seed=SEED, iterations=inv.iteration, starts=DEFAULT_STARTS,
               start_losses=[run["image_loss"] for run in multistart["runs"]], picked=multistart["picked"],
               wall_s=round(wall, 1), start_errors=start_err, final_errors=final_err, start_loss=start_loss,
               final_loss=final_loss, orders=orders, losses=inv.losses)
    inv.destroy()
    ctx.check(joint_start.min() >= 15.0, f"pose recovery start: every joint perturbed by >= 15 deg "
                                         f"({', '.join(f'{v:.1f}' for v in joint_start)})")
    ctx.check(final_err["joints"] <= JOINT_TOL_DEG, f"pose recovery: joints within {final_err['joints']:.3f} deg "
                                                    f"(goal <= {JOINT_TOL_DEG}) after {inv.iteration} iterations")
    ctx.check(final_err["letter"] <= LETTER_TOL, f"pose recovery: letter within {final_err['letter']:.4f} units "
                                                 f"(goal <= {LETTER_TOL}); its angles within "
                                                 f"{final_err['letter_angles']:.3f} deg, gripper "
                                                 f"{final_err['gripper'] * 1e3:.2f} mm")
    ctx.check(orders >= MIN_ORDERS, f"pose recovery: image loss {start_loss:.2e} -> {final_loss:.2e}, "
                                    f"{orders:.2f} orders (goal >= {MIN_ORDERS:g}); {wall:.0f} s on {ctx.arch}")
