"""Claim `pose_recovery_png`: the pose recovery of `pose_recovery`, from a PNG the forward renderer wrote.

The user's path: the forward renderer (`engine.render.Renderer`, what `python -m app render`
draws with) renders the timeline's frame at T, 256x128, written as an 8-bit sRGB PNG and
read back (`app.scenes.invert.load_target_png`); the fit compares the forward renderer's
image of the current theta with it (`compare="forward"`: the loss vanishes at the true pose
but for the PNG's 8-bit rounding) and follows the differentiable render's gradient
(engine.kernels.straight_through). Same start (seed), schedule and goals as `pose_recovery`.
Measured 2026-11-30 (docs/RESULTS.md): the letter within 3e-4 units (met), the joints within 1.09 degrees
and the loss down 2.15 orders (not met: the differentiable soft edge lies outside a silhouette only, and
the forward image's arm-against-floor edges are hard), ~200 s on the cpu.
"""
from __future__ import annotations


def run(ctx) -> None:
    from app.claims.pose_recovery import HEIGHT, T, WIDTH, recover
    from app.scenes.invert import load_target_png
    from app.scenes.robot_arm import scene_at
    from engine.image_io import srgb8, write_png
    from engine.render import Camera, Renderer

    frame = Renderer(WIDTH, HEIGHT).render(scene_at(T), Camera())
    path = ctx.out / "pose_recovery_target.png"
    write_png(path, srgb8(frame))
    recover(ctx, load_target_png(path, WIDTH, HEIGHT), "forward", "pose recovery from a PNG",
            "pose_recovery_png.png")
