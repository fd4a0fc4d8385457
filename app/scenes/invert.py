"""Recover the robot-arm scene's parameters from a picture, with a verdict (differentiable ray march, Gauss-Newton).

CLI: python -m app invert [--t T | --target-image PNG] [--set NAME=V,...] [--perturb GROUP=M,...] [--seed S]
     [--method search|adam] [--optimise GROUP,...] [--search-evals N] [--lm-iters N] [--hops N] ...
The recovery itself (phases, identifiability, verdict): app.scenes.inverse_render. Writes into --out:
invert.json (the verdict's `status` and criteria, each parameter's true/start/final value and
identifiability, the losses, the per-iteration parameter errors), loss.png/.svg (the full-resolution
image loss at its checks and the optimiser's loss, each phase marked), errors.png/.svg (the largest
parameter error per group, log scale, tolerances dashed; when the truth is known),
frames/iter_NNNNN.png (target | current | difference, captioned) and progress.gif.
Exit 0 only for `converged`; 1 for not_converged or diverged, with one line naming what is off;
130 for Ctrl-C (everything so far written, status interrupted).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from app.flags import add_arch_argument, command_parser
from app.scenes.inverse_render import (DEFAULT_PERTURB, DEFAULT_T, METHODS, SCAN_SPAN, TOLERANCES, InvertSettings,
                                       Recovery, check_view, load_target_png, png_compare, quantisation_loss,
                                       render_target, side_by_side, verdict_line)
from app.scenes.run_loop import iterate
from engine import scene_theta
from engine.diff_render import COMPARE_KINDS
from engine.errors import EXIT_OK, EXIT_RESULT_BAD, UserError
from engine.render import Camera

log = logging.getLogger(__name__)
OUTPUTS = ("invert.json", "loss.png", "loss.svg", "errors.png", "errors.svg", "progress.gif", "frames/iter_*.png")


def _parser() -> argparse.ArgumentParser:
    d = InvertSettings()
    cam = Camera()
    p = command_parser("invert", __doc__)
    p.add_argument("--t", type=float, default=DEFAULT_T, help=f"the timeline frame whose parameters are the target, "
                   f"and the reference the start is perturbed from, 0..1 (default {DEFAULT_T})")
    p.add_argument("--target-image", default=None, metavar="PNG",
                   help="fit this picture instead of a rendered one (same view: --width/--height/camera); "
                        "parameter errors are then against --t's parameters, and the verdict is the image "
                        "residual's. Render it with `python -m app render --edges soft` (the image this fit "
                        "compares); a hard-edged PNG recovers to about a degree (default: none, render the target)")
    p.add_argument("--set", default="", metavar="NAME=V,...",
                   help="change target parameters (angles in degrees), e.g. yaw=-50,tile_x=-0.8 (default: none)")
    p.add_argument("--perturb", default=DEFAULT_PERTURB, metavar="GROUP=M,...",
                   help=f"start = target moved by up to M per group, at least 3/4 M (angles in degrees, albedo "
                        f"relative), seeded; 'default' = {scene_theta.DEFAULT_PERTURB} (default: {DEFAULT_PERTURB})")
    p.add_argument("--seed", type=int, default=2, help="seed of the perturbation (default 2)")
    p.add_argument("--method", choices=METHODS, default=d.method,
                   help="search: a CMA-ES search on the half-resolution image, a Levenberg-Marquardt polish, then "
                        "while the image says the fit is not there, scans of every parameter and a polish; adam: "
                        "multi-start over the yaw, Adam on an image pyramid, the polish, perturbed restarts "
                        f"(default {d.method})")
    p.add_argument("--search-evals", type=int, default=d.search_evaluations, metavar="N",
                   help=f"renders of the search (method search; default {d.search_evaluations})")
    p.add_argument("--scan-points", type=int, default=d.scan_points, metavar="N",
                   help=f"a scan's grid per parameter, over +-{SCAN_SPAN:g} default perturbations around its value and "
                        f"around the start (method search; default {d.scan_points})")
    p.add_argument("--pair-points", type=int, default=d.pair_points, metavar="N",
                   help="a scan round's grid of each pair scanned together around the start (the tile's position; "
                        f"the wrist and the fingers), per axis (method search; 0: none; default {d.pair_points})")
    p.add_argument("--starts", type=int, default=d.starts, metavar="K",
                   help="method adam: multi-start: K short Adam runs from the start with the base yaw moved by 0, "
                        "+15, -15, "
                        f"+30, ... degrees; the lowest image loss continues; 1 = none (default {d.starts})")
    p.add_argument("--start-iters", type=int, default=d.start_iterations, metavar="N",
                   help=f"Adam iterations of each short run (default {d.start_iterations})")
    p.add_argument("--optimise", default=None, metavar="GROUP,...",
                   help=f"groups to optimise (default: the perturbed ones); groups: {', '.join(scene_theta.GROUPS)}")
    p.add_argument("--iters", type=int, default=d.iterations, help=f"Adam iterations of the basin phase "
                   f"(default {d.iterations})")
    p.add_argument("--lm-iters", type=int, default=d.lm_iterations, metavar="N",
                   help=f"Levenberg-Marquardt steps of the polish, at most; 0 = none (default {d.lm_iterations})")
    p.add_argument("--hops", type=int, default=d.hops, metavar="N",
                   help=f"further rounds while the image loss says the fit is not there, each ending in a polish: "
                        f"a scan of every parameter (search) or a restart from the best iterate perturbed by half "
                        f"the default perturbation, {d.hop_iterations} Adam iterations (adam); 0 = none "
                        f"(default {d.hops})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"Adam learning rate (default {d.lr})")
    p.add_argument("--check-every", type=int, default=d.check_every, metavar="K",
                   help="method adam: the host reads Adam's iterations from the device (losses, theta: one wait for "
                        "K of them) and checks the full-resolution image loss (best iterate, divergence) every K "
                        "iterations; in between an iteration only queues launches; progress frames land on these "
                        f"reads (default {d.check_every})")
    p.add_argument("--loss", choices=("l2", "l1"), default=d.loss, help="Adam's image loss (default l2)")
    p.add_argument("--levels", type=int, default=d.levels, help=f"Adam's image pyramid levels 1..4 "
                   f"(default {d.levels})")
    p.add_argument("--compare", choices=("auto", *COMPARE_KINDS), default="auto",
                   help="the image compared with the target: the forward renderer's (forward: what `render` writes "
                        "by default) or the differentiable render's own (diff: what `render --edges soft` writes); "
                        "the gradient is the differentiable render's either way (default auto: diff for a rendered "
                        "target and for a PNG that `render --edges soft` wrote, forward for any other --target-image)")
    p.add_argument("--edge-start", type=float, default=d.edge_start,
                   help=f"silhouette width in pixel footprints at Adam's start, narrowing to 1 (default "
                        f"{d.edge_start:g})")
    p.add_argument("--width", type=int, default=256, help="pixels, up to 512 (default 256)")
    p.add_argument("--height", type=int, default=128, help="pixels, up to 256 (default 128)")
    p.add_argument("--azimuth", type=float, default=cam.azimuth, help=f"camera, degrees (default {cam.azimuth:g})")
    p.add_argument("--elevation", type=float, default=cam.elevation,
                   help=f"camera, degrees, -89..89 (default {cam.elevation:g})")
    p.add_argument("--distance", type=float, default=cam.distance,
                   help=f"camera distance, 0.5..100 (default {cam.distance:g})")
    add_arch_argument(p)
    p.add_argument("--out", default="out/invert", help="output folder (default out/invert)")
    p.add_argument("--frame-every", type=int, default=10, metavar="K",
                   help="a progress frame every K steps (default 10)")
    return p


def _camera(args: argparse.Namespace) -> Camera:
    """The orbit camera of the --azimuth/--elevation/--distance flags (the ranges `render` accepts)."""
    for flag, value, lo, hi in (("--azimuth", args.azimuth, -1e9, 1e9), ("--elevation", args.elevation, -89.0, 89.0),
                                ("--distance", args.distance, 0.5, 100.0)):
        if not (math.isfinite(value) and lo <= value <= hi):
            raise UserError(f"{flag} {value:g} is out of range: choose {lo:g}..{hi:g}" if math.isfinite(value)
                            else f"{flag} {value} is not a finite number")
    return Camera(azimuth=args.azimuth, elevation=args.elevation, distance=args.distance)


def _validate(args: argparse.Namespace) -> tuple[dict[str, float], dict[int, float], tuple[str, ...], Camera]:
    if not (math.isfinite(args.t) and 0.0 <= args.t <= 1.0):
        raise UserError(f"--t {args.t} is outside the timeline: choose 0..1")
    check_view(args.width, args.height)
    if args.iters < 1 or args.frame_every < 1 or args.starts < 1 or args.start_iters < 1 or args.lm_iters < 0 \
            or args.hops < 0 or args.search_evals < 1 or args.scan_points < 3 or args.pair_points < 0:
        raise UserError("--iters, --frame-every, --starts, --start-iters and --search-evals must be at least 1, "
                        "--scan-points at least 3, --lm-iters, --hops and --pair-points at least 0")
    if not (args.lr > 0.0 and math.isfinite(args.lr)):
        raise UserError(f"--lr must be a positive number, got {args.lr}")
    if not 1 <= args.levels <= 4:
        raise UserError(f"--levels {args.levels}: choose 1..4")
    if not 1.0 <= args.edge_start <= 4.0:
        raise UserError(f"--edge-start {args.edge_start}: choose 1..4 pixel footprints")
    if args.target_image is not None and args.set:
        raise UserError("--set changes a rendered target; it cannot change --target-image")
    camera = _camera(args)
    perturb = scene_theta.parse_perturb(args.perturb)
    settings = scene_theta.parse_settings(args.set)
    groups = tuple(g.strip() for g in args.optimise.split(",") if g.strip()) if args.optimise else \
        tuple(g for g, m in perturb.items() if m > 0.0)
    if not groups:
        raise UserError("nothing to optimise: perturb a group (--perturb) or name groups (--optimise)")
    unknown = [g for g in groups if g not in scene_theta.GROUPS]
    if unknown:
        raise UserError(f"--optimise: unknown group {', '.join(unknown)} (groups: {', '.join(scene_theta.GROUPS)})")
    return perturb, settings, groups, camera


def checked_arguments(argv: list[str]) -> tuple[argparse.Namespace, tuple]:
    """The invert flags of `argv`, parsed and checked (one UserError line for a bad one); nothing runs."""
    args = _parser().parse_args(argv)
    return args, _validate(args)


def run_in_folder(argv: list[str], out: Path) -> dict:
    """`python -m app invert ARGV` with a rendered target, written into the existing folder `out` (a batch
    job's temporary folder: no folder claim); returns invert.json's record."""
    args, checked = checked_arguments(argv)
    if args.target_image is not None:
        raise UserError("a batch inversion renders its target: --target-image is for `python -m app invert`")
    _invert(args, checked, None, out)
    return json.loads((out / "invert.json").read_text())


def main(argv: list[str]) -> int:
    """`python -m app invert ...` (see the module docstring)."""
    from engine import output_dir

    args, checked = checked_arguments(argv)  # every bad flag and a bad target image fail before the folder is touched
    target_png = load_target_png(args.target_image, args.width, args.height) if args.target_image else None
    if target_png is not None and args.compare == "auto":
        args.compare = png_compare(args.target_image)
    with output_dir.claim(args.out, "invert", OUTPUTS) as folder:
        return _invert(args, checked, target_png, folder.path)


def _invert(args: argparse.Namespace, checked: tuple, target_png: np.ndarray | None, out: Path) -> int:
    from app.scenes.robot_arm import theta_at
    from engine import atomic, backend, image_io
    from engine.errors import Interrupted
    from engine.interrupt import graceful_stop

    perturb, overrides, groups, camera = checked
    truth = theta_at(args.t)
    for index, value in overrides.items():
        truth[index] = value
    running = backend.init(args.arch)
    started = time.perf_counter()
    compare = args.compare if args.compare != "auto" else "forward" if target_png is not None else "diff"
    target = target_png if target_png is not None else render_target(truth, args.width, args.height, camera, compare)
    start = scene_theta.perturb(truth, perturb, args.seed)
    settings = InvertSettings(iterations=args.iters, lr=args.lr, loss=args.loss, levels=args.levels,
                              edge_start=args.edge_start, groups=groups, compare=compare, starts=args.starts,
                              start_iterations=min(args.start_iters, args.iters), lm_iterations=args.lm_iters,
                              hops=args.hops, method=args.method, search_evaluations=args.search_evals,
                              scan_points=args.scan_points, pair_points=args.pair_points,
                              check_every=args.check_every)
    known = truth if target_png is None else None  # a picture's verdict is its residual's
    noise = quantisation_loss(target) if target_png is not None else 0.0
    rec = Recovery(target, start, known, args.width, args.height, camera, settings, target_noise=noise)
    frames: list[np.ndarray] = []
    framed = -1  # the step of the last frame

    def frame(_: int) -> None:  # before the recovery's next step: the image it has reached, every --frame-every steps
        nonlocal framed
        if rec.image_losses and rec.step_count % args.frame_every == 0 and rec.step_count != framed:
            frames.append(_frame(rec, target, out))
            framed = rec.step_count

    with graceful_stop() as stop:  # Ctrl-C ends the run; the work so far is written, marked interrupted
        phases = rec.steps(stop=lambda: bool(stop))  # the recovery asks the flag itself, between its steps
        iterate(lambda _: _progress_text(rec, next(phases, None)), None, desc=f"invert on {running.name}",
                on_frame=frame, total=rec.most_steps())
    if rec.step_count != framed:
        frames.append(_frame(rec, target, out))
    verdict = rec.verdict()
    record = _record(args, rec, verdict, running, truth, start, settings, camera, time.perf_counter() - started)
    _plots(out, rec, record, running.name)
    image_io.write_gif(out / "progress.gif", frames, fps=8.0)
    atomic.write_json(out / "invert.json", record)
    image = record["image_loss"]
    print(f"invert on {running.name}: {rec.step_count} steps in {record['wall_s']:.1f} s, image loss "
          f"{image['start']:.3e} -> {image['final']:.3e} ({image['orders']:.2f} orders); errors "
          + ", ".join(f"{g} {v:.3g} {scene_theta.UNITS[g]}" for g, v in record["errors"]["final"].items()
                      if g in groups)
          + f"; wrote {out}/invert.json, loss.png, errors.png, frames/, progress.gif")
    print(f"invert: {verdict_line(verdict)}")
    if rec.interrupted:
        raise Interrupted(stop.signal_name, f"after {rec.step_count} steps; {out}/ holds the work so far")
    return EXIT_OK if verdict["status"] == "converged" else EXIT_RESULT_BAD


def _progress_text(rec: Recovery, phase: str | None) -> str | None:
    """The progress bar's text after a step of `phase` (None: the recovery has ended)."""
    if phase is None:
        return None
    text = f"{phase}: loss {rec.losses[-1]:.3e}" if rec.losses else phase
    if rec.errors:
        text += f", joints {max(rec.errors[-1][scene_theta.GROUPS['joints']]):.2f} deg"
    return text


def _record(args, rec: Recovery, verdict: dict, running, truth, start, settings, camera, wall: float) -> dict:
    final = rec.best_theta
    return {
        "status": verdict["status"], "verdict": verdict,
        "arch": running.name, "backend": running.as_record(), "wall_s": round(wall, 3),
        "interrupted": rec.interrupted,
        "target": {"t": args.t, "image": args.target_image, "set": args.set},
        "view": {"width": args.width, "height": args.height, "azimuth": camera.azimuth,
                 "elevation": camera.elevation, "distance": camera.distance},
        "settings": {**asdict(settings), "perturb": scene_theta.parse_perturb(args.perturb), "seed": args.seed},
        "parameters": {name: {"true": scene_theta.display(i, truth[i]), "start": scene_theta.display(i, start[i]),
                              "final": scene_theta.display(i, final[i]), "group": scene_theta.group_of(i),
                              "unit": scene_theta.UNITS[scene_theta.group_of(i)],
                              **({"identifiable": verdict["identifiability"][name]["determined"]}
                                 if name in verdict["identifiability"] else {})}
                       for i, name in enumerate(scene_theta.NAMES)},
        "errors": {"start": scene_theta.group_errors(start, truth), "final": scene_theta.group_errors(final, truth)},
        "image_loss": {"start": rec.start_loss, "final": rec.best_loss,
                       "orders": verdict["image_criterion"]["orders"]},
        "search": rec.search_record, "multistart": rec.multistart, "adam": rec.adam_record,
        "levenberg_marquardt": rec.lm_record,
        "hops": rec.hops_done, **rec.host_cost_record(),
        "marks": [{"step": step, "phase": text} for step, text in rec.marks],
        "steps": rec.step_count, "losses": rec.losses,
        "image_losses": [{"step": step, "loss": value} for step, value in rec.image_losses],
        "parameter_names": list(scene_theta.NAMES), "parameter_errors": rec.errors,
    }


def group_error_series(errors: list[list[float]], groups: tuple[str, ...]) -> dict[str, list[float]]:
    """Per group, its largest parameter error per step (display units), from Recovery.errors."""
    table = np.asarray(errors, np.float64).reshape(len(errors), len(scene_theta.NAMES))
    return {g: table[:, scene_theta.GROUPS[g]].max(axis=1).tolist() for g in groups}


def _plots(out: Path, rec: Recovery, record: dict, arch: str) -> None:
    from app.plot import write_error_plot, write_loss_plot

    image = record["image_loss"]
    marks = list(rec.marks)
    write_loss_plot(out / "loss", rec.losses,
                    f"inverse render on {arch}, {record['status']}: image loss {image['start']:.2e} -> best "
                    f"{image['final']:.2e} ({image['orders']:.2f} orders)",
                    mark=(rec.step_count, "interrupted") if rec.interrupted else None,
                    ylabel="loss (linear RGB)", marks=marks, points=rec.image_losses,
                    points_label="image loss, full resolution (the verdict's)",
                    losses_label="the step's optimised loss (search: half resolution, its best so far; Adam: "
                                 "pyramid, wide edges;\nLM: Huber's, 2 levels; scan: full resolution)")
    if rec.errors:
        groups = rec.settings.groups
        write_error_plot(out / "errors", group_error_series(rec.errors, groups), scene_theta.UNITS,
                         TOLERANCES, f"parameter errors on {arch}, {record['status']}", marks=marks)


def _frame(rec: Recovery, target: np.ndarray, out: Path) -> np.ndarray:
    from app.scenes.inverse_render import plain_image, renderer
    from engine import image_io

    r = renderer()
    keep = r.theta_values()
    step, loss = rec.image_losses[-1]  # the last full-resolution image loss checked (the verdict's loss)
    panel = side_by_side(plain_image(r, rec.current), target,
                         f"step {rec.step_count}  image loss {loss:.3e} (at step {step})")
    r.set_theta(keep)
    image_io.write_png(out / "frames" / f"iter_{rec.step_count:05d}.png", panel)
    return panel
