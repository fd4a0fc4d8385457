"""Claim `pose_recovery_png`: the pose recovery of `pose_recovery`, from a PNG a user renders and saves.

The user's two commands, run in this process through their own entry points (the flags parsed
by the commands' parsers, the files written and read as they would be):

    python -m app render --edges soft --t 0.1 --width 256 --height 128 --out DIR/render
    python -m app invert --target-image DIR/render/frame.png --t 0.1 --seed 2 --out DIR/invert

`render --edges soft` draws the frame with the differentiable render's soft silhouettes and
writes it as an 8-bit sRGB PNG that says so in a text chunk; `invert --compare auto` reads
the chunk and compares the differentiable render of the current theta with it, so the loss
vanishes at the true pose but for the PNG's 8-bit rounding. Same start (seed), multi-start,
recovery and goals as `pose_recovery` at its first frame, but for the loss: down to the PNG's own rounding bound
rather than by orders; the checks read `invert.json`: the picture's own verdict (the image residual, no truth) must
say converged, and the truth must agree. A hard-edged PNG (`render`'s default)
does not meet them (about a degree: docs/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json

from app.claims.pose_recovery import HEIGHT, PERTURB, SEED, T, WIDTH


def run(ctx) -> None:
    from app.scenes import invert, render_cli
    from app.scenes.inverse_render import TOLERANCES

    folder = ctx.out / "pose_recovery_png"
    view = ["--t", str(T), "--width", str(WIDTH), "--height", str(HEIGHT), "--arch", ctx.arch]
    parser = argparse.ArgumentParser()
    render_cli.add_arguments(parser)
    render_cli.run(parser.parse_args(["--edges", "soft", *view, "--out", str(folder / "render")]))
    png = folder / "render" / "frame.png"
    perturb = ",".join(f"{group}={magnitude:g}" for group, magnitude in PERTURB.items())
    code = invert.main(["--target-image", str(png), *view, "--seed", str(SEED), "--perturb", perturb,
                        "--out", str(folder / "invert")])
    record = json.loads((folder / "invert" / "invert.json").read_text())
    verdict = record["verdict"]
    start, final = record["errors"]["start"], record["errors"]["final"]
    loss = record["image_loss"]
    multistart = record["multistart"]
    ctx.metric(t=T, width=WIDTH, height=HEIGHT, seed=SEED, compare=record["settings"]["compare"],
               status=record["status"], exit=code, steps=record["steps"], starts=multistart["starts"],
               start_losses=[run["image_loss"] for run in multistart.get("runs", [])], picked=multistart.get("picked"),
               wall_s=record["wall_s"], start_errors=start, final_errors=final,
               start_loss=loss["start"], final_loss=loss["final"], orders=loss["orders"])
    ctx.check(record["settings"]["compare"] == "diff", f"pose recovery from a PNG: `invert --compare auto` compares "
                                                       f"the {record['settings']['compare']} image with the soft PNG")
    joint_start = [abs(p["start"] - p["true"]) for p in record["parameters"].values() if p["group"] == "joints"]
    ctx.check(min(joint_start) >= 15.0, f"pose recovery from a PNG start: every joint perturbed by >= 15 deg "
                                        f"({', '.join(f'{v:.1f}' for v in joint_start)})")
    ctx.check(record["status"] == "converged" and code == 0,
              f"pose recovery from a PNG: the picture's own verdict is {record['status']} (exit {code}): image loss "
              f"{loss['final']:.2e} within the PNG's rounding {verdict['image_criterion']['target_noise']:.2e} plus "
              f"{verdict['image_criterion']['loss_of_one_tolerance']:.2e} for a one-tolerance error")
    off = {g: final[g] for g, tol in TOLERANCES.items() if g in PERTURB and final[g] > tol}
    ctx.check(not off, f"pose recovery from a PNG, against the truth: joints within {final['joints']:.3f} deg, letter "
                       f"{final['letter']:.2g} units and {final['letter_angles']:.3f} deg, gripper "
                       f"{final['gripper'] * 1e3:.2f} mm (tolerances {TOLERANCES}) after {record['steps']} steps")
    noise = verdict["image_criterion"]["target_noise"]
    # Orders of reduction cannot be the goal here: the PNG's rounding bounds the loss any pose can reach (Huber's
    # image loss from this start: about 2 orders above it), so the goal is to reach that bound.
    ctx.check(loss["final"] <= noise, f"pose recovery from a PNG: image loss {loss['start']:.2e} -> "
                                      f"{loss['final']:.2e} ({loss['orders']:.2f} orders), down to the PNG's own "
                                      f"rounding {noise:.2e}; {record['wall_s']:.0f} s on {ctx.arch}")
