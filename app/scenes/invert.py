"""Inverse rendering of the robot-arm scene: recover the scene parameters theta from a picture.

    inv = InverseRender(target_image, start=theta0, truth=theta_star, width=256, height=128)
    for _ in range(inv.settings.iterations):
        inv.step()                      # loss before the update; Adam on the device
    inv.theta(), inv.losses, inv.errors # the errors per group (engine.scene_theta.group_errors) if truth is known

The target is a linear RGB image of the scene seen from `camera`: rendered by the
differentiable renderer at known parameters (`render_target`), or read from a PNG
(`load_target_png`: any sRGB PNG of the right size). A PNG that `python -m app render
--edges soft` wrote is that same differentiable image (its text chunk says so,
`png_compare`) and is compared with the differentiable render of the current theta; any
other PNG (`render`'s default hard edges) with the forward renderer's image (the renderer
`render` draws with by default; `settings.compare`, engine.diff_render.DiffRenderer.set_compare),
so the loss vanishes at the true pose either way; the gradient is the differentiable
render's either way. Only the first recovers the pose to the claim's tolerances: against a
hard-edged picture the fit stalls near a degree (docs/RESULTS.md). The optimiser is Adam
(engine.autodiff.optim) on the renderer's theta field, with frozen groups masked and limits
clamped on the device after each step (engine.theta_adam.ThetaAdam). Schedule (measured on
this scene, docs/RESULTS.md): an L2 loss over a 4-level image pyramid, silhouettes twice as
wide (2 pixel footprints) at first and narrowing to 1 over the first 60 % of the
iterations, the learning rate falling from lr to lr / 10 on a cosine.

Multi-start (`--starts K`, default DEFAULT_STARTS; `pick_start`): before the fit, K short runs of
the fit's own schedule (its first START_ITERATIONS iterations, fresh Adam each) start from the
perturbed start with the base yaw moved by 0, +15, -15, +30, -30, ... degrees (SPREAD_DEG); the
start whose short run ends with the lowest full-resolution image loss (`image_loss`; ties: the
earlier) is the fit's start, run with a fresh Adam and the whole schedule. Only yaw is spread: it is
the joint with the longest lever on the image, and the one measured to start on the rim of its
basin (seed 5: the other joints ~18 degrees off, a yaw error of 20 degrees or more moves the arm's
image off its target and the fit turns yaw the wrong way; docs/RESULTS.md). 15 degrees is under the
perturbation's 15-20, so one of +-15 lands within ~5 degrees of the truth when yaw starts 15-20
off. K = 1 runs no short run: the fit of the perturbed start, as before the multi-start. Seeds 1-6 and 8
recover with K = 3 (1, 2, 4, 6 with K = 1); seed 7 with neither (its wrist: docs/RESULTS.md). The spread
needs the joints optimised (`--optimise`); without them K is 1.

CLI: python -m app invert [--t T | --target-image PNG] [--set NAME=V,...] [--perturb GROUP=M,...]
     [--seed S] [--optimise GROUP,...] [--iters N] [--lr LR] [--loss l2|l1] [--levels L]
     [--compare auto|forward|diff] [--width W --height H] [--azimuth A --elevation E --distance D] [--arch A] [--out DIR]
     [--frame-every K] [--starts K] [--start-iters N]
writes DIR/invert.json (with "multistart": each short run's image loss and the pick), DIR/loss.png and .svg, DIR/frames/iter_NNNNN.png (current | target | |difference|)
and DIR/progress.gif. Ctrl-C stops after the current iteration and writes everything so far (exit 130).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine import scene_theta
from engine.diff_render import COMPARE_KINDS
from engine.errors import UserError
from engine.render import Camera

MAX_WIDTH, MAX_HEIGHT = 512, 256  # the shared differentiable renderer's size: one compile serves every view up to it
DEFAULT_PERTURB = "joints=20,gripper=0.03,letter=0.2,letter_angles=10"
DEFAULT_T = 0.1  # the arm stands clear of the tiles against the floor; the fallen tile lies on the table
log = logging.getLogger(__name__)
DEFAULT_STARTS = 3  # multi-start: starts spread over the base yaw (docs/RESULTS.md: seeds 1-8 with 3 starts)
START_ITERATIONS = 50  # each start's short run: the first iterations of the fit's schedule
SPREAD_NAME, SPREAD_DEG = "yaw", 15.0  # the parameter the starts spread over, and the spacing (degrees)
OUTPUTS = ("invert.json", "loss.png", "loss.svg", "progress.gif", "frames/iter_*.png")


@dataclass(frozen=True)
class InvertSettings:
    iterations: int = 400
    lr: float = 0.01
    loss: str = "l2"
    levels: int = 4  # image pyramid levels of the loss
    edge_start: float = 2.0  # silhouette width (pixel footprints) at the start, narrowing to 1
    narrow_until: float = 0.6  # share of the iterations over which the silhouettes narrow
    lr_end: float = 0.1  # the learning rate ends at lr * lr_end (cosine)
    cycles: int = 2  # the schedule runs this many times (a restart shakes the fit out of a shallow minimum)
    groups: tuple[str, ...] = ("joints", "gripper", "letter", "letter_angles")  # optimised groups
    compare: str = "diff"  # the image the loss compares with the target (engine.diff_render.DiffRenderer.set_compare)


def renderer():
    """The process's shared differentiable renderer (engine.diff_render.shared_renderer at MAX_WIDTH x MAX_HEIGHT)."""
    from engine.diff_render import shared_renderer

    return shared_renderer(MAX_WIDTH, MAX_HEIGHT)


def check_view(width: int, height: int) -> None:
    from engine.render import check_size

    check_size(width, height)
    if width > MAX_WIDTH or height > MAX_HEIGHT:
        raise UserError(f"inverse rendering runs at up to {MAX_WIDTH}x{MAX_HEIGHT}, got {width}x{height}")


def render_target(theta: np.ndarray, width: int, height: int, camera: Camera = Camera(),
                  compare: str = "diff") -> np.ndarray:
    """The image of theta that a fit with this `compare` matches: linear RGB (height, width, 3) float32; "diff":
    the differentiable render's (1-pixel silhouettes), "forward": the forward renderer's (what `render` writes)."""
    check_view(width, height)
    r = renderer()
    r.set_view(camera, width, height)
    r.set_compare(compare)
    r.set_loss("l2", levels=1, edge_px=1.0)
    r.set_theta(theta)
    return r.render()


def load_target_png(path: str | Path, width: int, height: int) -> np.ndarray:
    """A PNG of the scene as linear RGB (height, width, 3); one-line UserError if unreadable or of another size."""
    from engine.image_io import linear_from_srgb8, read_png_rgb

    try:
        pixels = read_png_rgb(path)
    except FileNotFoundError:
        raise UserError(f"--target-image {path}: no such file") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise UserError(f"--target-image {path}: not a readable image ({type(exc).__name__})") from None
    if pixels.shape[:2] != (height, width):
        raise UserError(f"--target-image {path} is {pixels.shape[1]}x{pixels.shape[0]}; the view is {width}x{height} "
                        f"(render it with the same --width/--height, or pass those)")
    return linear_from_srgb8(pixels)


def png_compare(path: str | Path) -> str:
    """The image a fit of this PNG compares (`--compare auto`): the differentiable render's for a PNG that
    `python -m app render --edges soft` wrote (it says so in a text chunk), else the forward renderer's."""
    from app.scenes.render_cli import png_edges

    if png_edges(path) == "soft":
        return "diff"
    log.warning("%s was not written by `python -m app render --edges soft`: compared with the forward renderer's "
                "image; a hard-edged picture recovers the pose to about a degree only (docs/RESULTS.md)", path)
    return "forward"


class InverseRender:
    """Adam on theta against a target image (see the module docstring)."""

    def __init__(self, target: np.ndarray, start: np.ndarray, truth: np.ndarray | None = None, width: int = 256,
                 height: int = 128, camera: Camera = Camera(), settings: InvertSettings = InvertSettings()):
        from engine.theta_adam import ThetaAdam

        check_view(width, height)
        if settings.iterations < 1:
            raise UserError(f"--iters must be at least 1, got {settings.iterations}")
        unknown = [g for g in settings.groups if g not in scene_theta.GROUPS]
        if unknown or not settings.groups:
            raise UserError(f"--optimise: unknown or no groups {', '.join(unknown)} (groups: "
                            f"{', '.join(scene_theta.GROUPS)})")
        self.settings, self.width, self.height, self.camera = settings, width, height, camera
        self.truth = None if truth is None else np.asarray(truth, np.float64)
        self.start = np.asarray(start, np.float64)
        self.target = np.asarray(target, np.float32)
        self.r = renderer()
        self.r.set_view(camera, width, height)
        self.r.set_compare(settings.compare)
        self.r.set_loss(settings.loss, settings.levels, settings.edge_start)
        self.r.set_target(self.target)
        self.r.set_theta(self.start)
        self.opt = ThetaAdam(self.r.theta, scene_theta.mask(settings.groups), *scene_theta.limits(), lr=settings.lr)
        self.iteration = 0
        self.skipped = 0  # iterations whose gradient was not finite (no update)
        self.losses: list[float] = []
        self.errors: list[dict[str, float]] = []  # per iteration, before its update (when truth is known)

    def _schedule(self) -> tuple[float, float]:
        """Silhouette width and learning rate at this iteration: `cycles` equal cosine cycles (warm restarts)."""
        s = self.settings
        length = s.iterations / s.cycles
        frac = min((self.iteration % length) / length, 1.0) if self.iteration < s.iterations else 1.0
        edge = 1.0 + (s.edge_start - 1.0) * max(0.0, 1.0 - frac / s.narrow_until)
        lr = s.lr * (s.lr_end + (1.0 - s.lr_end) * 0.5 * (1.0 + math.cos(math.pi * frac)))
        return edge, lr

    def step(self) -> float:
        """One iteration: loss and gradient at the current theta, then a masked, clamped Adam step."""
        edge, self.opt.lr = self._schedule()
        self.r.set_loss(self.settings.loss, self.settings.levels, edge)
        if self.truth is not None:
            self.errors.append(scene_theta.group_errors(self.r.theta_values(), self.truth))
        loss, grad = self.r.loss_and_gradient()
        if not (np.isfinite(loss) and np.all(np.isfinite(grad))):  # never seen since length(); counted if it is
            self.opt.discard_gradient()
            self.skipped += 1
        self.opt.step()
        self.losses.append(loss)
        self.iteration += 1
        return loss

    def theta(self) -> np.ndarray:
        return self.r.theta_values()

    def image_loss(self, theta: np.ndarray | None = None) -> float:
        """The plain full-resolution L2 image loss (1-pixel silhouettes) at theta (default: the current one), of the
        compared image (settings.compare)."""
        keep = self.r.theta_values()
        self.r.set_loss("l2", 1, 1.0)
        self.r.set_theta(keep if theta is None else theta)
        value = self.r.loss_value()
        self.r.set_theta(keep)
        return value

    def current_image(self) -> np.ndarray:
        self.r.set_loss("l2", 1, 1.0)
        return self.r.render()

    def destroy(self) -> None:
        self.opt.destroy()


def spread_offsets(starts: int) -> list[float]:
    """The starts' yaw offsets in degrees: 0 (the start itself), +SPREAD_DEG, -SPREAD_DEG, +2 SPREAD_DEG, ..."""
    return [0.0 if k == 0 else SPREAD_DEG * ((k + 1) // 2) * (1.0 if k % 2 else -1.0) for k in range(starts)]


def spread_starts(start: np.ndarray, starts: int) -> list[np.ndarray]:
    """`start` with its yaw moved by each of `spread_offsets(starts)`."""
    index = scene_theta.NAMES.index(SPREAD_NAME)
    out = []
    for offset in spread_offsets(starts):
        theta = np.array(start, np.float64)
        theta[index] += math.radians(offset)
        out.append(theta)
    return out


def pick_start(target: np.ndarray, start: np.ndarray, truth: np.ndarray | None, width: int, height: int,
               camera: Camera, settings: InvertSettings, starts: int, iterations: int = START_ITERATIONS,
               on_step=None, stop=None) -> tuple[np.ndarray, dict]:
    """The multi-start (module docstring): `starts` short runs of `iterations` steps of `settings`' schedule, one per
    `spread_starts`; returns the start whose run ended with the lowest `image_loss` (ties: the earlier) and the
    record invert.json keeps ("multistart"). on_step(k, inverse_render, loss) after each step; a truthy `stop`
    (engine.interrupt.graceful_stop) ends the runs early, the pick then among the runs so far."""
    runs, thetas, yaw = [], spread_starts(start, starts), scene_theta.NAMES.index(SPREAD_NAME)
    for k, (offset, theta) in enumerate(zip(spread_offsets(starts), thetas)):
        inv = InverseRender(target, theta, truth, width, height, camera, settings)
        try:
            while inv.iteration < iterations and not stop:
                loss = inv.step()
                if on_step is not None:
                    on_step(k, inv, loss)
            runs.append({"yaw_offset_deg": offset, "start_yaw_deg": scene_theta.display(yaw, theta[yaw]),
                "iterations": inv.iteration, "image_loss": inv.image_loss(), "losses": inv.losses,
                "errors": scene_theta.group_errors(inv.theta(), truth) if truth is not None else None})
        finally:
            inv.destroy()
        if stop:
            break
    picked = min(range(len(runs)), key=lambda k: runs[k]["image_loss"])
    record = {"starts": starts, "iterations": iterations, "spread": {"parameter": SPREAD_NAME, "step_deg": SPREAD_DEG},
              "runs": runs, "picked": picked}
    return thetas[picked], record


def side_by_side(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """sRGB uint8 panel: current | target | |current - target| (x4, clipped)."""
    from engine.image_io import srgb8

    diff = np.clip(np.abs(current - target) * 4.0, 0.0, 1.0)
    return np.concatenate([srgb8(current), srgb8(target), srgb8(diff)], axis=1)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other bad input
        raise UserError(f"python -m app invert: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    from app.cli import add_arch_argument

    d = InvertSettings()
    cam = Camera()
    p = _Parser(prog="python -m app invert", description="Recover the robot-arm scene's parameters from a picture "
                                                          "(differentiable ray march + Adam).")
    p.add_argument("--t", type=float, default=DEFAULT_T, help=f"the timeline frame whose parameters are the target, "
                   f"and the reference the start is perturbed from (default {DEFAULT_T})")
    p.add_argument("--target-image", default=None, metavar="PNG",
                   help="fit this picture instead of a rendered one (same view: --width/--height/camera); "
                        "parameter errors are then against --t's parameters. Render it with `python -m app render "
                        "--edges soft` (the image this fit compares); a hard-edged PNG recovers to about a degree")
    p.add_argument("--set", default="", metavar="NAME=V,...",
                   help="change target parameters (angles in degrees), e.g. yaw=-50,tile_x=-0.8")
    p.add_argument("--perturb", default=DEFAULT_PERTURB, metavar="GROUP=M,...",
                   help=f"start = target moved by up to M per group, at least 3/4 M (angles in degrees, albedo "
                        f"relative), seeded; 'default' = {scene_theta.DEFAULT_PERTURB} (default: {DEFAULT_PERTURB})")
    p.add_argument("--seed", type=int, default=2, help="seed of the perturbation (default 2, the claim pose_recovery's; "
                   "from a rendered target with the default --starts 3 seeds 1-6 and 8 of 1-8 recover, 7 does not; with "
                   "--starts 1 seeds 3, 5 and 7 do not: docs/RESULTS.md)")
    p.add_argument("--starts", type=int, default=DEFAULT_STARTS, metavar="K",
                   help=f"multi-start: K short runs from the start with the base yaw moved by 0, +{SPREAD_DEG:g}, "
                        f"-{SPREAD_DEG:g}, +{2 * SPREAD_DEG:g}, ... degrees; the lowest image loss is fitted with the "
                        f"whole schedule; 1 = no short runs (default {DEFAULT_STARTS})")
    p.add_argument("--start-iters", type=int, default=START_ITERATIONS, metavar="N",
                   help=f"iterations of each short run: the first N of the schedule, at most --iters (default "
                        f"{START_ITERATIONS})")
    p.add_argument("--optimise", default=None, metavar="GROUP,...",
                   help=f"groups to optimise (default: the perturbed ones); groups: {', '.join(scene_theta.GROUPS)}")
    p.add_argument("--iters", type=int, default=d.iterations, help=f"iterations (default {d.iterations})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"Adam learning rate (default {d.lr})")
    p.add_argument("--loss", choices=("l2", "l1"), default=d.loss, help="image loss (default l2)")
    p.add_argument("--levels", type=int, default=d.levels, help=f"image pyramid levels 1..4 (default {d.levels})")
    p.add_argument("--compare", choices=("auto", *COMPARE_KINDS), default="auto",
                   help="the image compared with the target: the forward renderer's (forward: what `render` writes "
                        "by default, so a PNG of it is matched exactly at the true pose) or the differentiable "
                        "render's own (diff: what `render --edges soft` writes); the gradient is the differentiable "
                        "render's either way (default auto: diff for a rendered target and for a PNG that `render "
                        "--edges soft` wrote, forward for any other --target-image)")
    p.add_argument("--edge-start", type=float, default=d.edge_start,
                   help=f"silhouette width in pixel footprints at the start, narrowing to 1 (default {d.edge_start:g})")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--azimuth", type=float, default=cam.azimuth, help="camera, degrees (as `render`)")
    p.add_argument("--elevation", type=float, default=cam.elevation)
    p.add_argument("--distance", type=float, default=cam.distance)
    add_arch_argument(p)
    p.add_argument("--out", default="out/invert", help="output folder (default out/invert)")
    p.add_argument("--frame-every", type=int, default=10, metavar="K", help="a progress frame every K iterations")
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
    if not 0.0 <= args.t <= 1.0:
        raise UserError(f"--t {args.t} is outside the timeline: choose 0..1")
    check_view(args.width, args.height)
    if args.iters < 1 or args.frame_every < 1 or args.starts < 1 or args.start_iters < 1:
        raise UserError("--iters, --frame-every, --starts and --start-iters must be at least 1")
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
    from app.plot import write_loss_plot
    from app.scenes.robot_arm import theta_at
    from engine import atomic, backend, image_io
    from engine.errors import Interrupted
    from engine.interrupt import graceful_stop
    from engine.progress import bar

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
                              edge_start=args.edge_start, groups=groups, compare=compare)
    starts = args.starts if "joints" in groups else 1
    if starts != args.starts:
        log.info("--starts %d: the starts spread over the base yaw, which is not optimised here; one start", args.starts)
    short = min(args.start_iters, args.iters) if starts > 1 else 0
    frames = []
    progress = bar(total=starts * short + args.iters, desc=f"invert on {running.name}")
    with graceful_stop() as stop:  # Ctrl-C ends the loop; the work so far is written, marked interrupted
        multistart = None
        if starts > 1:
            def shown(k: int, run: InverseRender, loss: float) -> None:
                progress.set_postfix_str(f"start {k + 1}/{starts} (yaw {spread_offsets(starts)[k]:+g} deg) loss "
                                         f"{loss:.3e}", refresh=False)
                progress.update()

            fit_start, multistart = pick_start(target, start, truth, args.width, args.height, camera, settings, starts,
                                               short, shown, stop)
            log.info("multi-start: image losses %s after %d iterations; start %d (yaw %+g deg) continues",
                     ", ".join(f"{run['image_loss']:.3e}" for run in multistart["runs"]), short,
                     multistart["picked"] + 1, spread_offsets(starts)[multistart["picked"]])
        else:
            fit_start = start
        inv = InverseRender(target, fit_start, truth, args.width, args.height, camera, settings)
        start_loss = inv.image_loss(start)
        for i in range(args.iters):
            if stop:
                break
            if i % args.frame_every == 0:
                frames.append(_frame(inv, target, out, i))
            loss = inv.step()
            progress.set_postfix_str(f"loss {loss:.3e} joints {inv.errors[-1]['joints']:.2f} deg", refresh=False)
            progress.update()
    interrupted = bool(stop)
    progress.close()
    frames.append(_frame(inv, target, out, inv.iteration))
    wall = time.perf_counter() - started
    final = inv.theta()
    final_loss = inv.image_loss()
    final_errors = scene_theta.group_errors(final, truth)
    orders = math.log10(start_loss / final_loss) if final_loss > 0 else float("inf")
    image_io.write_gif(out / "progress.gif", frames, fps=8.0)
    write_loss_plot(out / "loss", inv.losses, f"inverse render on {running.name}: image loss {start_loss:.2e} -> "
                                              f"{final_loss:.2e} ({orders:.2f} orders)",
                    mark=(inv.iteration, "interrupted") if interrupted else None,
                    ylabel="optimised loss\n(L2 over the image pyramid, linear RGB)")
    record = {
        "arch": running.name, "backend": running.as_record(), "wall_s": round(wall, 3), "interrupted": interrupted,
        "target": {"t": args.t, "image": args.target_image, "set": args.set},
        "view": {"width": args.width, "height": args.height, "azimuth": camera.azimuth,
                 "elevation": camera.elevation, "distance": camera.distance},
        "settings": {**asdict(settings), "perturb": perturb, "seed": args.seed},
        "parameters": {name: {"true": scene_theta.display(i, truth[i]), "start": scene_theta.display(i, start[i]),
                              "final": scene_theta.display(i, final[i]), "group": scene_theta.group_of(i),
                              "unit": scene_theta.UNITS[scene_theta.group_of(i)]}
                       for i, name in enumerate(scene_theta.NAMES)},
        "errors": {"start": scene_theta.group_errors(start, truth), "final": final_errors},
        "image_loss": {"start": start_loss, "final": final_loss, "orders": orders},
        "multistart": multistart or {"starts": 1},
        "iterations": inv.iteration, "skipped_non_finite": inv.skipped, "losses": inv.losses,
        "parameter_errors": inv.errors,
    }
    atomic.write_json(out / "invert.json", record)
    picked = (f" from start {multistart['picked'] + 1} of {starts} (yaw "
              f"{multistart['runs'][multistart['picked']]['yaw_offset_deg']:+g} deg)" if multistart else "")
    print(f"invert on {running.name}: {inv.iteration} iterations{picked} in {wall:.1f} s, image loss {start_loss:.3e} -> "
          f"{final_loss:.3e} ({orders:.2f} orders); errors "
          + ", ".join(f"{g} {v:.3g} {scene_theta.UNITS[g]}" for g, v in final_errors.items() if g in groups)
          + f"; wrote {out}/invert.json, loss.png/.svg, frames/, progress.gif")
    inv.destroy()
    if interrupted:
        raise Interrupted(stop.signal_name, f"after {inv.iteration} iterations; {out}/ holds the work so far")
    return 0


def _frame(inv: InverseRender, target: np.ndarray, out: Path, iteration: int) -> np.ndarray:
    from engine import image_io

    panel = side_by_side(inv.current_image(), target)
    image_io.write_png(out / "frames" / f"iter_{iteration:05d}.png", panel)
    return panel
