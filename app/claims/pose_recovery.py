"""Claim `pose_recovery`: recover the arm's pose and the letter's from a seeded perturbation, with a true verdict.

Targets: the differentiable render of the timeline's frames in FRAMES, 256x128, on backend A: t = 0.1 (the
arm clear of the tiles, the fallen letter on the table), 0.5 (the arm carrying the letter: contacts, the tile
half hidden) and 0.9 (the letter set back in its slot). Starts: every joint moved by 15..20 degrees
(engine.scene_theta.perturb: at least 3/4 of the magnitude, random sign), the gripper by up to 0.03 m, the
letter tile by up to 0.2 in position and 10 degrees in yaw and tilt, seeded. The recovery is `python -m app
invert`'s (app.scenes.inverse_render.Recovery: identifiability, CMA-ES search, Levenberg-Marquardt, scans,
verdict). Goals per frame: status `converged` (every parameter the image determines within its tolerance:
joints 0.5 degrees, gripper 0.005 m, letter 0.01 units and 0.5 degrees), the plain image loss down >= 3
orders, and the image-only verdict agreeing. The sweep over every frame and five seeds is `python -m app bench
invert_sweep` (docs/RESULTS.md).
"""
from __future__ import annotations

import time

import numpy as np

from engine import scene_theta

FRAMES, WIDTH, HEIGHT, SEED = (0.1, 0.5, 0.9), 256, 128, 2
T = FRAMES[0]  # the frame pose_recovery_png renders and recovers
PERTURB = {"joints": 20.0, "gripper": 0.03, "letter": 0.2, "letter_angles": 10.0}
MIN_ORDERS = 3.0


def run(ctx) -> None:
    from app.scenes.inverse_render import (InvertSettings, Recovery, plain_image, render_target, renderer,
                                           side_by_side, verdict_line)
    from app.scenes.robot_arm import theta_at
    from engine.image_io import write_png

    for t in FRAMES:
        truth = theta_at(t)
        target = render_target(truth, WIDTH, HEIGHT)
        start = scene_theta.perturb(truth, PERTURB, SEED)
        started = time.perf_counter()
        rec = Recovery(target, start, truth, WIDTH, HEIGHT, settings=InvertSettings(groups=tuple(PERTURB)))
        for _ in rec.steps():
            pass
        wall = time.perf_counter() - started
        verdict = rec.verdict()
        image = verdict["image_criterion"]
        start_err, final_err = scene_theta.group_errors(start, truth), scene_theta.group_errors(rec.best_theta, truth)
        joint_start = np.degrees(np.abs(start - truth)[scene_theta.GROUPS["joints"]])
        write_png(ctx.out / f"pose_recovery_t{t:g}.png",
                  side_by_side(plain_image(renderer(), rec.best_theta), target, f"t = {t:g}: {verdict['status']}"))
        ctx.metric(**{f"t{t:g}": {"seed": SEED, "status": verdict["status"], "steps": rec.step_count,
                                  "wall_s": round(wall, 1), "start_errors": start_err, "final_errors": final_err,
                                  "start_loss": image["start_loss"], "final_loss": image["final_loss"],
                                  "orders": image["orders"], "unidentifiable": verdict["unidentifiable"],
                                  "off": verdict["off"]}})
        ctx.check(joint_start.min() >= 15.0, f"t = {t:g}: every joint perturbed by >= 15 deg at the start "
                                             f"({', '.join(f'{v:.1f}' for v in joint_start)})")
        ctx.check(verdict["status"] == "converged",
                  f"t = {t:g}: {verdict_line(verdict)}; joints within {final_err['joints']:.3f} deg, letter "
                  f"{final_err['letter']:.4f} units and {final_err['letter_angles']:.3f} deg, gripper "
                  f"{final_err['gripper'] * 1e3:.2f} mm after {rec.step_count} steps, {wall:.0f} s on {ctx.arch}")
        ctx.check(image["orders"] >= MIN_ORDERS, f"t = {t:g}: image loss {image['start_loss']:.2e} -> "
                                                 f"{image['final_loss']:.2e}, {image['orders']:.2f} orders "
                                                 f"(goal >= {MIN_ORDERS:g})")
        ctx.check(image["met"] == (verdict["status"] == "converged"),
                  f"t = {t:g}: the image-only verdict (a picture's, no truth) agrees: image loss "
                  f"{image['final_loss']:.2e} vs {image['loss_of_one_tolerance']:.2e} for a one-tolerance error")

