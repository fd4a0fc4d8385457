"""Inverse rendering of the robot-arm scene: recover the scene parameters theta from a picture, and say how well.

    rec = Recovery(target_image, start=theta0, truth=theta_star, width=256, height=128)
    for phase in rec.steps():           # one unit of work per item: a search generation, a Levenberg-Marquardt
                                        # step, one parameter's scan (method adam: an Adam iteration)
        pass                            # (the GUI pulls a few per frame; `stop` ends it early)
    verdict = rec.verdict()             # {"status": "converged" | "not_converged" | "diverged" | "interrupted", ...}
    rec.best_theta, rec.losses, rec.errors, rec.marks

The target is a linear RGB image of the scene seen from `camera`: rendered by the differentiable
renderer at known parameters (`render_target`), or read from a PNG (`load_target_png`). A PNG that
`python -m app render --edges soft` wrote is that same differentiable image (its text chunk says so:
`png_compare`) and is compared with the differentiable render of the current theta; any other PNG
with the forward renderer's image (`settings.compare`), so the loss vanishes at the true pose either
way; the gradient is the differentiable render's either way.

The recovery (`Recovery.steps`), in phases, each marked on the loss plot (`marks`). Two methods
(`InvertSettings.method`); "search", the default, measured better on the sweep (docs/RESULTS.md):

1. identify: the exact image Jacobian at the start (`DiffRenderer.image_jacobian`) says which optimised
   parameters the picture determines (`engine.gauss_newton.identifiability`: the image change when a
   parameter moves by its tolerance and the others re-fit, against an 8-bit step). Undetermined ones are
   held at their start for the whole run and left out of the verdict.
2. search (method "search"): CMA-ES (`engine.cmaes`) over the free parameters in units of their default
   perturbation (`search_scale`), from the start with step SEARCH_SIGMA, on the forward renderer's image at
   half resolution (`half_resolution_loss`); a gradient method from a start 15-20 degrees off per joint
   ends in another basin as often as not (the arm leaves its own silhouette), a population does not.
   Method "adam" instead: multi-start (K short Adam runs with the base yaw moved by 0, +15, -15, ...
   degrees), then Adam on an L2 loss over a 4-level pyramid, silhouettes 2 pixel footprints wide narrowing
   to 1, the learning rate on a cosine, twice (a warm restart); the full-resolution image loss every
   `check_every` iterations keeps the best iterate and catches divergence.
3. Levenberg-Marquardt (the polish): from the best iterate (the identifiability redone there frees a held
   parameter this pose shows), Gauss-Newton steps on the full- and half-resolution residual with the exact
   Jacobian, reweighted for Huber's loss, its threshold lowered in stages (`POLISH_THRESHOLDS`); a step is taken
   only if the loss falls, and the best iterate (by the image loss, Huber's: `image_loss`) is kept. Then stages
   without the pixels the render does not differentiate (`unpredicted_pixels`: seams, creases, contacts), whose
   flips make the loss near the truth a staircase the Gauss-Newton model cannot see.
4. further rounds (`hops`), while the image loss is above what a one-tolerance error would leave (the picture
   says the fit is not there, truth or no truth), each ending in a polish: "search" scans pairs around the start
   (`PAIR_SCANS`: the tile's position, for a tile the search pushed behind the arm; the wrist and the fingers,
   for a coupled pair of wrong values), then every parameter alone over
   +-SCAN_SPAN default perturbations around its value and around the start, at full resolution (a small part,
   the wrist or the fingers, that the half-resolution search left in a wrong basin); "adam" restarts from the
   best iterate moved by half the default perturbation (seeded). The best iterate over all of them is kept.
5. final: the identifiability at the result and the verdict (`verdict`): with the truth known (a rendered
   target), converged = every determined parameter within its tolerance (`TOLERANCES`); without it
   (a picture), converged = an image loss below what a one-tolerance error of the least visible determined
   parameter would leave. Both criteria are recorded whenever both can be computed.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import numpy as np

from engine import scene_theta
from engine.errors import UserError
from engine.host_costs import IterationCosts, count_host_costs
from engine.gauss_newton import (NOISE_FLOOR, Identifiability, huber_loss, huber_weights, identifiability, lm_step,
                                 pyramid_residual, residual_scale)
from engine.render import Camera
from engine.theta_adam import DISCARDED, LOSS, THETA, ThetaAdam

log = logging.getLogger(__name__)

MAX_WIDTH, MAX_HEIGHT = 512, 256  # the shared differentiable renderer's size: one compile serves every view up to it
DEFAULT_PERTURB = "joints=20,gripper=0.03,letter=0.2,letter_angles=10"
DEFAULT_T = 0.1
DEFAULT_STARTS = 3  # multi-start: starts spread over the base yaw
START_ITERATIONS = 50  # each start's short run: the first iterations of the Adam schedule
SPREAD_NAME, SPREAD_DEG = "yaw", 15.0  # the parameter the starts spread over, and the spacing (degrees)
# A recovered parameter is within these of the truth (display units: degrees, m, scene units, relative).
TOLERANCES = {"joints": 0.5, "gripper": 0.005, "letter": 0.01, "letter_angles": 0.5, "albedo": 0.02, "sun": 0.5}
# The Adam run diverged at a check where the image loss is not finite or this many times the start's, or where a
# parameter moved this many tolerances from the start (1000: 500 degrees of a joint, 10 units of the letter: far
# outside anything the picture can ask; the image loss alone cannot tell, since a pose flung out of view can
# match a picture better than a misaligned one).
DIVERGE_FACTOR, DIVERGE_TOLERANCES = 10.0, 1000.0
# A restart ("hop") moves every free parameter of the best iterate by u * HOP_SCALE * its default perturbation
# (engine.scene_theta.DEFAULT_PERTURB), u uniform in [0.5, 1], random sign, seeded by HOP_SEED + the hop's number.
HOP_SCALE, HOP_SEED = 0.5, 1000
# The search (method "search"): CMA-ES over the free parameters in units of their default perturbation, from
# the start with this step, seeded (a run is reproducible bit for bit).
SEARCH_SIGMA, SEARCH_SEED = 0.5, 0
METHODS = ("search", "adam")
MAX_CHECK_EVERY = 10_000  # Adam iterations the device records between two reads (InvertSettings.check_every)
# A scan moves one parameter at a time over this many default perturbations either side of its current value
# and of the start (the truth is at most one from the start; a search can leave a small part, the wrist or the
# fingers, further off: `scan_grid`).
SCAN_SPAN = 2.0
# A scan round first scans pairs of parameters that no one-parameter scan moves alone (`Recovery._pair_scan`): each
# pair on a PAIR_POINTS^2 grid over +-PAIR_SPAN default perturbations around the start, with the components of its
# `reset` groups at the start's and the rest as fitted.


class PairScan(NamedTuple):
    pair: tuple[str, str]  # the components scanned together
    reset: tuple[str, ...]  # groups put back at the start's for the scan
    half_resolution: bool  # the grid on the search's half-resolution image (4x cheaper), else the image loss


PAIR_SCANS = (
    # The tile's position on the table's plane: with the arm fitted, a tile the search pushed behind the arm is a
    # needle that neither a one-parameter scan (the other coordinate keeps it hidden) nor a CMA-ES of the tile's
    # pose from the start finds (measured at t = 0.9 seed 1 and t = 0.4 seed 3: 400 full-resolution renders did
    # not). The grid does: the image loss there is half the hidden tile's within +-0.05 units of the true
    # position, angles 10 degrees off, at half resolution too (about 3 s).
    PairScan(("tile_x", "tile_z"), ("letter", "letter_angles"), half_resolution=True),
    # The wrist and the fingers: the search can leave them a coupled pair of wrong values (t = 0.8 seed 5: the
    # wrist 24 degrees and the fingers 0.095 m off) that each one-parameter scan keeps, the other holding it. On
    # the full-resolution image loss: the half-resolution image ranks them wrongly (measured at t = 0.5: its
    # minimum is the wrist 10 degrees off; the forward renderer's offset from the target, 8.4e-4, dwarfs what these
    # small parts change, 1e-5), about 13 s.
    PairScan(("wrist", "grip"), (), half_resolution=False),
)
PAIR_SPAN, PAIR_POINTS = 1.5, 13
LM_LEVELS = (0, 1)  # the polish's residual: full and half resolution
# The recovery's image loss is Huber's with this threshold on a pixel channel's difference (linear RGB): the L2
# loss wherever every difference is below it (an 8-bit PNG's rounding is), linear beyond. Near the truth a
# handful of pixels that a discrete choice of the render (an edge layer, a material) puts 0.3-0.7 off dominate
# the L2 loss and raise a barrier before the minimum, which Huber's loss does not have (measured at t = 0.6,
# seed 1: L2 along the line to the truth rises 20 % then drops; Huber's falls all the way).
HUBER = 0.01
# The polish's Huber thresholds, one stage each: from the L2 loss down to HUBER (graduated: far from the truth a
# low threshold weakens the pull of the parts that are off; measured at t = 1, seed 1: the polish at HUBER
# alone left the gripper 12 tolerances off where the L2 polish recovered it).
POLISH_THRESHOLDS = (math.inf, 0.1, HUBER)
# Then the polish leaves out the pixels the render does not differentiate (`unpredicted_pixels`: a material seam,
# a crease, a contact between parts, an edge layer switching): each flips by 0.1-0.7 within a hundredth of a
# tolerance, so the loss near the truth is a staircase that the Gauss-Newton model does not see, and the stages
# above stall there (measured at t = 0.5, seed 3: the tile's tilt stalled 2.2 tolerances off; without the 542
# unpredicted pixels, 1.7 % of the image, one stage reached the truth within 0.005 tolerance). A pixel is
# unpredicted where moving one free parameter by +-PROBE tolerances changes it by more than LINEAR_MISS beyond
# what the Jacobian predicts; the set is dilated by a pixel (the seams move during the stage) and redone at the
# stage's end, up to MASK_ROUNDS times while a round still improves.
PROBE, LINEAR_MISS, MASK_ROUNDS = 0.25, 0.01, 3
# A Levenberg-Marquardt step whose largest component is below this many tolerances changes nothing the verdict
# sees: a stage ends there, and raises its damping no further (each rise was a render, measured: 42 of a
# recovery's 109 trial renders were such steps, rejected one after another at a stage's end).
SETTLED_STEP = 1e-3
STATUSES = ("converged", "not_converged", "diverged", "interrupted")


@dataclass(frozen=True)
class InvertSettings:
    iterations: int = 400  # Adam iterations of the basin phase (150 left t = 0.1 seed 2 with the wrist 8 degrees off)
    lr: float = 0.01
    loss: str = "l2"
    levels: int = 4  # image pyramid levels of the Adam loss
    edge_start: float = 2.0  # silhouette width (pixel footprints) at the start, narrowing to 1
    narrow_until: float = 0.6  # share of the iterations over which the silhouettes narrow
    lr_end: float = 0.1  # the learning rate ends at lr * lr_end (cosine)
    cycles: int = 2  # the schedule runs this many times (a warm restart shakes the fit out of a shallow minimum)
    groups: tuple[str, ...] = ("joints", "gripper", "letter", "letter_angles")  # optimised groups
    compare: str = "diff"  # the image the loss compares with the target (engine.diff_render.DiffRenderer.set_compare)
    starts: int = DEFAULT_STARTS
    start_iterations: int = START_ITERATIONS
    lm_iterations: int = 60  # Levenberg-Marquardt steps of the polish, at most (it stops when its steps vanish)
    check_every: int = 10  # Adam iterations between full-resolution image-loss checks (best iterate, divergence)
    hops: int = 2  # further rounds while the image says the fit is not there: a scan (search) or a restart (adam)
    hop_iterations: int = 60  # Adam iterations of each restart before its polish (method adam)
    method: str = "search"  # "search": CMA-ES, polish, scans; "adam": multi-start, Adam, polish, restarts
    search_evaluations: int = 600  # the CMA-ES search's budget of half-resolution renders
    scan_points: int = 33  # a scan's grid per parameter: -SCAN_SPAN..+SCAN_SPAN default perturbations
    pair_points: int = PAIR_POINTS  # a scan round's grid of each pair scan (PAIR_SCANS), per axis (0: none)


def renderer():
    """The process's shared differentiable renderer (engine.diff_render.shared_renderer at MAX_WIDTH x MAX_HEIGHT)."""
    from engine.diff_render import shared_renderer

    return shared_renderer(MAX_WIDTH, MAX_HEIGHT)


LOAD_VIEW = (16, 8)  # `load_kernels`' view: every kernel launched, almost no work


def load_kernels(theta: np.ndarray) -> None:
    """Launch every kernel a recovery with the default settings launches, once, at a LOAD_VIEW view: the
    differentiable render taped, its reverse passes (`image_jacobian`) and the search's forward render. Their first
    launch in a process loads them from the kernel cache (or compiles them): 3-4 s on 2 cores (measured: a
    process's first recovery 14.5 s, the same recovery again 11.3 s), which the GUI spends at reset, where its
    status bar says so, instead of in the recovery's first steps. Leaves the renderers' views to be set again
    (every user sets its own)."""
    from app.scenes.robot_arm import scene_from_theta

    r = renderer()
    r.set_view(Camera(), *LOAD_VIEW)  # (and the "diff" comparison, the default settings')
    r.set_loss("l2", 1, 1.0)
    r.set_theta(theta)
    r.image_jacobian()
    _forward_renderer(*LOAD_VIEW).render(scene_from_theta(theta), Camera())


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
    """A PNG of the scene as linear RGB (height, width, 3); one-line UserError if missing, empty, unreadable or
    of another size."""
    from engine.image_io import linear_from_srgb8, read_png_rgb

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--target-image {path}: no such file")
    if path.stat().st_size == 0:
        raise UserError(f"--target-image {path}: the file is empty (0 bytes)")
    try:
        pixels = read_png_rgb(path)
    except (OSError, ValueError, SyntaxError) as exc:
        raise UserError(f"--target-image {path}: not a readable image ({type(exc).__name__})") from None
    if pixels.shape[:2] != (height, width):
        raise UserError(f"--target-image {path} is {pixels.shape[1]}x{pixels.shape[0]}; the view is {width}x{height} "
                        f"(render it with the same --width/--height, or pass those)")
    return linear_from_srgb8(pixels)


def quantisation_loss(linear: np.ndarray) -> float:
    """The most image loss an 8-bit sRGB picture of `linear` can leave at the true pose: 0.5 * mean(e^2) with e
    each channel value's largest rounding error in linear RGB (half a code step, on the steeper side). A bound,
    not an expectation: a flat region's values share one rounding error, so no averaging can be relied on."""
    from engine.image_io import linear_from_srgb8, srgb8

    code = srgb8(linear).astype(np.int64)
    here = linear_from_srgb8(code.astype(np.uint8)).astype(np.float64)
    up = linear_from_srgb8(np.clip(code + 1, 0, 255).astype(np.uint8)).astype(np.float64)
    down = linear_from_srgb8(np.clip(code - 1, 0, 255).astype(np.uint8)).astype(np.float64)
    error = 0.5 * np.maximum(up - here, here - down)
    return float(0.5 * np.mean(error ** 2))


def png_compare(path: str | Path) -> str:
    """The image a fit of this PNG compares (`--compare auto`): the differentiable render's for a PNG that
    `python -m app render --edges soft` wrote (it says so in a text chunk), else the forward renderer's."""
    from engine.image_io import png_edges

    if png_edges(path) == "soft":
        return "diff"
    log.warning("%s was not written by `python -m app render --edges soft`: compared with the forward renderer's "
                "image; a hard-edged picture recovers the pose to about a degree only (docs/RESULTS.md)", path)
    return "forward"


def optimised_indices(groups: tuple[str, ...]) -> np.ndarray:
    """theta's components in `groups`, in theta's order."""
    return np.array([i for i in range(len(scene_theta.NAMES)) if scene_theta.group_of(i) in groups], np.int64)


def tolerance_scale(theta: np.ndarray) -> np.ndarray:
    """(N_THETA,) each component's tolerance in internal units (radians, m, units; albedos relative to theta)."""
    out = np.zeros(len(scene_theta.NAMES))
    for i in range(len(out)):
        group = scene_theta.group_of(i)
        tol = TOLERANCES[group]
        out[i] = (math.radians(tol) if group in scene_theta.ANGLE_GROUPS
                  else tol * max(abs(theta[i]), 1e-3) if group == "albedo" else tol)
    return out


def parameter_errors(theta: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(N_THETA,) |theta - truth| per component in display units (degrees, m, units, relative)."""
    out = np.abs(np.asarray(theta, np.float64) - np.asarray(truth, np.float64))
    for i in range(len(out)):
        group = scene_theta.group_of(i)
        if group in scene_theta.ANGLE_GROUPS:
            out[i] = math.degrees(out[i])
        elif group == "albedo":
            out[i] /= max(abs(truth[i]), 1e-12)
    return out


class InverseRender:
    """Adam on theta against a target image: the basin phase's optimiser (one `step()` an iteration)."""

    def __init__(self, target: np.ndarray, start: np.ndarray, truth: np.ndarray | None = None, width: int = 256,
                 height: int = 128, camera: Camera = Camera(), settings: InvertSettings = InvertSettings(),
                 held: tuple[int, ...] = ()):

        check_settings(settings)
        check_view(width, height)
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
        mask = scene_theta.mask(settings.groups)
        mask[list(held)] = 0.0
        self.opt = ThetaAdam(self.r.theta, mask, *scene_theta.limits(), lr=settings.lr, history=settings.check_every)
        self.iteration = 0
        self.skipped = 0  # iterations whose gradient was not finite (no update)
        self.losses: list[float] = []

    def _schedule(self) -> tuple[float, float]:
        """Silhouette width and learning rate at this iteration: `cycles` equal cosine cycles (warm restarts)."""
        s = self.settings
        length = s.iterations / s.cycles
        frac = min((self.iteration % length) / length, 1.0) if self.iteration < s.iterations else 1.0
        edge = 1.0 + (s.edge_start - 1.0) * max(0.0, 1.0 - frac / s.narrow_until)
        lr = s.lr * (s.lr_end + (1.0 - s.lr_end) * 0.5 * (1.0 + math.cos(math.pi * frac)))
        return edge, lr

    def step(self) -> None:
        """One iteration: loss and gradient at the current theta, then a masked, clamped Adam step that ignores a
        gradient that is not finite; launches only (the host waits for nothing): `read` gets the results, at most
        `settings.check_every` iterations after the last read."""
        edge, self.opt.lr = self._schedule()
        self.r.set_loss(self.settings.loss, self.settings.levels, edge)
        self.r.gradient_on_device()
        self.opt.step(self.r.loss)
        self.iteration += 1

    @property
    def unread(self) -> int:
        """Iterations since the last `read`."""
        return self.opt.unread

    def read_due(self, iterations: int) -> bool:
        """Whether the host reads now, in a run of `iterations`: every `settings.check_every`-th and the last."""
        return self.unread == self.settings.check_every or self.iteration == iterations

    def read(self) -> list[tuple[float, np.ndarray]]:
        """(loss, theta after the step) of every iteration since the last read, in one wait for the device."""
        rows = self.opt.read()
        self.skipped += int(rows[:, DISCARDED].sum())
        self.losses.extend(rows[:, LOSS].tolist())
        if len(rows):
            self.r.read_slots()  # warns if the last evaluation had to drop edge layers
        return [(float(row[LOSS]), row[THETA:].copy()) for row in rows]

    def theta(self) -> np.ndarray:
        return self.r.theta_values()

    def destroy(self) -> None:
        self.opt.destroy()


def plain_image(r, theta: np.ndarray, keep: bool = False) -> np.ndarray:
    """Renderer `r`'s plain full-resolution image (1-pixel silhouettes) at theta, linear RGB (H, W, 3); r's theta
    is left at `theta`, its loss settings at the plain loss. `keep`: the render stays on r's tape, so that
    `r.image_jacobian()` at theta runs only its reverse passes."""
    r.set_loss("l2", 1, 1.0)
    r.set_theta(theta)
    return r.render_taped() if keep else r.render()


def image_loss(r, theta: np.ndarray, target: np.ndarray) -> float:
    """The recovery's image loss: Huber's (`HUBER`) on the plain full-resolution image (1-pixel silhouettes) of
    renderer `r` at theta against `target`, a mean over the 3 W H values (so the L2 image loss where every
    difference is below the threshold); r's theta is left at `theta`, its loss settings at the plain loss."""
    return loss_of_image(plain_image(r, theta), target)


def loss_of_image(image: np.ndarray, target: np.ndarray) -> float:
    """`image_loss` of an image already rendered (`plain_image`)."""
    res, _ = pyramid_residual(image, target, None, (0,))
    return huber_loss(res, residual_scale(target.shape, (0,)), HUBER) if np.all(np.isfinite(res)) else math.inf


def check_settings(s: InvertSettings) -> None:
    if s.iterations < 1 or s.starts < 1 or s.start_iterations < 1 or s.lm_iterations < 0 \
            or s.hops < 0 or s.hop_iterations < 1 or s.cycles < 1:
        raise UserError("--iters, --starts and --start-iters must be at least 1, --lm-iters and --hops at least 0")
    if not 1 <= s.check_every <= MAX_CHECK_EVERY:
        raise UserError(f"--check-every {s.check_every}: choose 1..{MAX_CHECK_EVERY} (the device keeps that many "
                        "iterations for the host to read)")
    if s.method not in METHODS:
        raise UserError(f"--method {s.method}: choose one of {', '.join(METHODS)}")
    if not (s.search_evaluations >= 1 and s.scan_points >= 3 and s.pair_points >= 0):
        raise UserError("--search-evals must be at least 1, --scan-points at least 3 and --pair-points at least 0")
    unknown = [g for g in s.groups if g not in scene_theta.GROUPS]
    if unknown or not s.groups:
        raise UserError(f"--optimise: unknown or no groups {', '.join(unknown)} (groups: "
                        f"{', '.join(scene_theta.GROUPS)})")


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


def hop_start(theta: np.ndarray, free: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A restart: the components `free` of theta moved by u * HOP_SCALE * their group's default perturbation
    (u uniform in [0.5, 1], random sign), clamped into the limits."""
    out = np.array(theta, np.float64)
    lo, hi = scene_theta.limits()
    for i in free:
        group = scene_theta.group_of(int(i))
        magnitude = HOP_SCALE * scene_theta.DEFAULT_PERTURB[group] * rng.uniform(0.5, 1.0) * rng.choice([-1.0, 1.0])
        if group in scene_theta.ANGLE_GROUPS:
            out[i] += math.radians(magnitude)
        elif group == "albedo":
            out[i] *= 1.0 + magnitude
        else:
            out[i] += magnitude
    return np.clip(out, lo, hi)


def search_scale() -> np.ndarray:
    """(N_THETA,) one unit of the search per component: its group's default perturbation in internal units; 0 for
    the tile's height, which a perturbation never moves (the tile rests on the table or rides in the gripper):
    searched, a tile sunk behind the row looks like one standing in it, further along the same view rays."""
    out = np.zeros(len(scene_theta.NAMES))
    for i in range(len(out)):
        group = scene_theta.group_of(i)
        magnitude = scene_theta.DEFAULT_PERTURB[group]
        out[i] = math.radians(magnitude) if group in scene_theta.ANGLE_GROUPS else magnitude
    out[scene_theta.NAMES.index("tile_y")] = 0.0
    return out


def half_resolution_loss(target: np.ndarray, camera: Camera) -> Callable[[np.ndarray], float]:
    """theta -> the search's objective: the forward renderer's image at half the target's resolution against the
    target's 2x2 box average, L2 over two pyramid levels. About half the differentiable render's cost per
    evaluation at 128x64 (17 against 36 ms); its images differ from the differentiable render's (sampling, edges)
    by an offset that ranks candidates alike (measured: it found the basin more often than the differentiable
    render at half resolution, docs/DESIGN.md "A global search before the polish")."""
    from app.scenes.robot_arm import scene_from_theta
    from engine.gauss_newton import box_halve

    half = box_halve(np.asarray(target, np.float64))
    forward = _forward_renderer(half.shape[1], half.shape[0])
    lo, hi = scene_theta.limits()

    def loss(theta: np.ndarray) -> float:
        image = forward.render(scene_from_theta(np.clip(theta, lo, hi)), camera)
        residual, _ = pyramid_residual(image, half, None, (0, 1))
        value = 0.5 * float(residual @ residual)
        return value if math.isfinite(value) else math.inf
    return loss


_forward: list = []


def unpredicted_pixels(r, theta: np.ndarray, image: np.ndarray, jac: np.ndarray, free: np.ndarray) -> np.ndarray:
    """(H, W) bool: the pixels renderer `r` does not differentiate at theta, dilated by one pixel.

    A pixel is flagged where moving one of the `free` components by +-PROBE tolerances changes it by more than
    LINEAR_MISS (in some channel) beyond what `jac` ((H, W, 3, N_THETA), at `image`) predicts: 2 len(free)
    renders. Leaves r's theta at `theta`."""
    step = PROBE * tolerance_scale(theta)
    flagged = np.zeros(image.shape[:2], bool)
    for i in free:
        for sign in (1.0, -1.0):
            moved = np.array(theta, np.float64)
            moved[i] += sign * step[i]
            predicted = image + jac[..., i] * (sign * step[i])
            flagged |= np.abs(plain_image(r, moved) - predicted).max(axis=2) > LINEAR_MISS
    grown = flagged.copy()
    grown[1:] |= flagged[:-1]
    grown[:-1] |= flagged[1:]
    grown[:, 1:] |= flagged[:, :-1]
    grown[:, :-1] |= flagged[:, 1:]
    r.set_theta(theta)
    return grown


def cmaes_generations(loss: Callable[[np.ndarray], float], theta: np.ndarray, moving: np.ndarray, scale: np.ndarray,
                      budget: int) -> Iterator[tuple]:
    """CMA-ES (`engine.cmaes`, SEARCH_SIGMA, SEARCH_SEED) from theta over its components `moving`, in units of
    `scale`, clamped into the limits, minimising `loss` for `budget` evaluations; yields (the search, its best
    theta so far) after every generation."""
    from engine.cmaes import CMAES

    lo, hi = scene_theta.limits()

    def candidate(x: np.ndarray) -> np.ndarray:
        out = np.array(theta, np.float64)
        out[moving] += scale * x
        return np.clip(out, lo, hi)

    search = CMAES(np.zeros(len(moving)), SEARCH_SIGMA, SEARCH_SEED)
    while not search.done(budget):
        xs = search.ask()
        search.tell(xs, [loss(candidate(x)) for x in xs])
        yield search, candidate(search.best_x)


def scan_grid(centre: float, start: float, scale: float, points: int) -> np.ndarray:
    """The values a scan tries for one component: `points` over +-SCAN_SPAN `scale`s around `centre` (the current
    value), then those of the same grid around `start` that lie outside it. The truth is within a default
    perturbation of the start (SCAN_SPAN of them for a start twice as far), while a search that left a small part
    in a wrong basin can leave it anywhere: measured, the wrist 76-108 degrees off and the tile turned 85 (t = 0.8
    seeds 3 and 5, t = 0.9 seed 1, t = 0.4 seed 3), beyond the +-40 degrees a grid around the current value
    reaches."""
    offsets = np.linspace(-SCAN_SPAN, SCAN_SPAN, points) * scale
    around_start = start + offsets
    return np.concatenate([centre + offsets, around_start[np.abs(around_start - centre) > SCAN_SPAN * scale]])


def _forward_renderer(width: int, height: int):
    """The process's forward renderer for the search, resized to the view (buffers only, no recompile)."""
    from engine.render import Renderer

    if not _forward:
        _forward.append(Renderer(width, height))
    _forward[0].resize(width, height)
    return _forward[0]


def side_by_side(current: np.ndarray, target: np.ndarray, caption: str | None = None) -> np.ndarray:
    """sRGB uint8 panel: target | current | |current - target| (x4, clipped), with `caption` drawn on top."""
    from engine.image_io import caption_panel, srgb8

    diff = np.clip(np.abs(current - target) * 4.0, 0.0, 1.0)
    panel = np.concatenate([srgb8(target), srgb8(current), srgb8(diff)], axis=1)
    return panel if caption is None else caption_panel(panel, caption, ("target", "current", "|difference| x4"))


@dataclass
class PolishState:
    """One polish's Levenberg-Marquardt steps so far, over its stages (`Recovery._lm_stage`)."""
    taken: int = 0
    last_step: np.ndarray | None = None  # the last step taken, per free component, in tolerances
    damping: float = 1e-3
    loss: float = math.nan  # the loss of the last stage that ran
    left_out: int = 0  # pixels the last masked stage left out (`unpredicted_pixels`)


@dataclass
class Recovery:
    """The whole recovery of theta from `target` (module docstring), run by iterating `steps()`."""

    target: np.ndarray
    start: np.ndarray
    truth: np.ndarray | None = None
    width: int = 256
    height: int = 128
    camera: Camera = Camera()
    settings: InvertSettings = InvertSettings()
    losses: list[float] = field(default_factory=list)  # per step: the loss that step's optimiser minimised
    image_losses: list[tuple[int, float]] = field(default_factory=list)  # (step, full-resolution image loss)
    errors: list[list[float]] = field(default_factory=list)  # per step: parameter_errors (when the truth is known)
    marks: list[tuple[int, str]] = field(default_factory=list)  # (step, what began there)
    diverged_at: int | None = None
    target_noise: float = 0.0  # the most image loss the target can leave at the true pose (an 8-bit PNG's rounding)

    def __post_init__(self) -> None:
        check_settings(self.settings)
        check_view(self.width, self.height)
        self.start = np.asarray(self.start, np.float64)
        self.truth = None if self.truth is None else np.asarray(self.truth, np.float64)
        self.target = np.asarray(self.target, np.float32)
        self.free = optimised_indices(self.settings.groups)
        self.held: tuple[int, ...] = ()
        self.best_theta, self.best_loss = self.start.copy(), math.inf
        self.start_loss = math.nan
        self.identify_start: Identifiability | None = None
        self.identify_final: Identifiability | None = None
        self.identify_truth: Identifiability | None = None  # at the truth, when known: what the target shows
        self.multistart: dict = {"starts": 1}
        # Adam's iterations (method adam) and those whose loss or gradient was not finite (no step from it)
        self.adam_record: dict = {"iterations": 0, "discarded_gradients": 0}
        self.search_record: dict = {"evaluations": 0}
        self.lm_record: dict = {"steps": 0}
        self.hops_done = 0
        self._identified_at: np.ndarray | None = None  # the theta identify_final was measured at
        self.current = self.start.copy()
        self._last_image: tuple[bytes, np.ndarray] | None = None  # (theta's bytes, its plain_image): `image_at`
        self.interrupted = False
        self.finished = False
        self.host_costs: dict[str, IterationCosts] = {}  # per kind of step (the name steps() yields)

    # -- bookkeeping -----------------------------------------------------------------------------------
    @property
    def step_count(self) -> int:
        return len(self.losses)

    def _record(self, loss: float, theta: np.ndarray) -> None:
        self.losses.append(float(loss))
        self.current = np.asarray(theta, np.float64)
        if self.truth is not None:
            self.errors.append(parameter_errors(theta, self.truth).tolist())

    def _check(self, r, theta: np.ndarray, candidate: bool = True, value: float | None = None,
               image: np.ndarray | None = None) -> float:
        """The full-resolution image loss at theta (`value` if already known; else that of its `plain_image`,
        `image` if already rendered), kept as the best iterate if it is the lowest so far (and `candidate`: a
        diverged iterate never is, however well a pose flung out of view matches)."""
        if value is None:
            image = plain_image(r, theta) if image is None else image
            value = loss_of_image(image, self.target)
        if image is not None:
            self._last_image = (np.asarray(theta, np.float64).tobytes(), image)
        self.image_losses.append((self.step_count, value))
        if candidate and value < self.best_loss:
            self.best_theta, self.best_loss = np.array(theta, np.float64), value
        return value

    def image_at(self, theta: np.ndarray) -> np.ndarray | None:
        """The `plain_image` at theta if the last check rendered it (the panel shows it without a render), else
        None."""
        if self._last_image is not None and self._last_image[0] == np.asarray(theta, np.float64).tobytes():
            return self._last_image[1]
        return None

    def _identify(self, r, theta: np.ndarray) -> Identifiability:
        r.set_loss("l2", 1, 1.0)
        r.set_theta(theta)
        _, jac = r.image_jacobian()
        return identifiability(jac[..., self.free].reshape(-1, len(self.free)), tolerance_scale(theta)[self.free],
                               threshold=HUBER)

    def _hold_undetermined(self, ident: Identifiability, theta: np.ndarray) -> np.ndarray:
        """Hold the parameters `ident` finds undetermined at their start; returns theta with them put back."""
        self.held = tuple(int(self.free[k]) for k in np.flatnonzero(~ident.determined))
        theta = np.array(theta, np.float64)
        theta[list(self.held)] = self.start[list(self.held)]
        if self.held:
            log.info("unidentifiable from this picture, held at the start: %s",
                     ", ".join(scene_theta.NAMES[i] for i in self.held))
        return theta

    def _release_determined(self, ident: Identifiability) -> None:
        """Free the held parameters that `ident` (nearer the truth than the start) finds determined. None is held
        anew here: a parameter the start showed stays free, however weakly this pose shows it (the polish's
        damping keeps a weak direction from running)."""
        determined = {int(self.free[k]) for k in np.flatnonzero(ident.determined)}
        released = [i for i in self.held if i in determined]
        if released:
            self.held = tuple(i for i in self.held if i not in determined)
            log.info("determined from here, free again: %s", ", ".join(scene_theta.NAMES[i] for i in released))

    # -- the phases ------------------------------------------------------------------------------------
    def steps(self, stop: Callable[[], bool] | None = None) -> Iterator[str]:
        """Run the recovery, yielding the phase's name after every step; a truthy `stop()` ends it (interrupted)."""
        stopped = stop or (lambda: False)
        r = renderer()
        r.set_view(self.camera, self.width, self.height)
        r.set_compare(self.settings.compare)
        r.set_target(self.target)
        self.start_loss = self._check(r, self.start)
        self.marks.append((0, "identify"))
        self.identify_start = self._identify(r, self.start)
        theta = self._hold_undetermined(self.identify_start, self.start)
        yield "identify"
        phases = self._phases(r, theta)
        while True:
            with count_host_costs() as costs:  # a Python wrapper per launch: small beside a render's milliseconds
                name = next(phases, None)
            if name is None:
                break
            self.host_costs.setdefault(name, IterationCosts()).add(costs)
            yield name
            if stopped():
                self.interrupted = True
                break
        if not self.interrupted and self._identified_at is not self.best_theta:
            self.identify_final = self._identify(r, self.best_theta)
        if not self.interrupted and self.truth is not None:
            self.identify_truth = self._identify(r, self.truth)
        r.set_theta(self.best_theta)
        self.finished = True

    def _phases(self, r, theta: np.ndarray) -> Iterator[str]:
        s = self.settings
        if s.method == "search":
            yield from self._search(r, theta)
            yield from self._polish(r, self.best_theta)
        else:
            fit_start = yield from self._multistart(theta)
            basin = yield from self._adam(fit_start, s, "Adam (pyramid, wide edges)")
            yield from self._polish(r, basin)
        for hop in range(s.hops):
            self.identify_final = self._identify(r, self.best_theta)
            self._identified_at = self.best_theta
            if self._image_met(self.identify_final) or self.diverged_at is not None:
                return
            if s.method == "search":
                start = yield from self._scan(r, self.best_theta, f"round {hop + 2}: scan every parameter")
            else:
                start = hop_start(self.best_theta, self.free_now(), np.random.default_rng(HOP_SEED + hop))
                settings = replace(s, iterations=s.hop_iterations, cycles=1)
                start = yield from self._adam(start, settings, f"hop {hop + 1}: Adam from the best, perturbed")
            yield from self._polish(r, start)
            self.hops_done = hop + 1

    def most_steps(self) -> int:
        """An upper bound of the steps `steps()` yields with the parameters free now (a progress bar's total; most
        runs stop earlier)."""
        s = self.settings
        if s.method == "search":
            from engine.cmaes import default_popsize

            searched = len(self._searched()[0])
            first = s.search_evaluations // default_popsize(max(searched, 1))
            again = searched  # a scan yields once per parameter
        else:
            first = s.starts * s.start_iterations + s.iterations
            again = s.hop_iterations
        return 1 + first + s.lm_iterations + s.hops * (again + s.lm_iterations)

    def free_now(self) -> np.ndarray:
        """The optimised components not held."""
        return np.array([i for i in self.free if i not in self.held], np.int64)

    def _searched(self) -> tuple[np.ndarray, np.ndarray]:
        """The components the search and the scans move (free, not held, a non-zero `search_scale`) and their
        scales."""
        free = self.free_now()
        scale = search_scale()[free]
        return free[scale > 0.0], scale[scale > 0.0]

    def _search(self, r, theta: np.ndarray) -> Iterator[str]:
        """CMA-ES from theta over the free parameters (in default perturbations, `search_scale`) on the
        half-resolution forward image; one step per generation; the best candidate is checked at full resolution
        (the best iterate is the start's if none beats it)."""
        s = self.settings
        moving, scale = self._searched()
        self.marks.append((self.step_count, f"CMA-ES search, half resolution ({s.search_evaluations} renders)"))
        if len(moving):
            for search, best in cmaes_generations(half_resolution_loss(self.target, self.camera), theta, moving,
                                                  scale, s.search_evaluations):
                self._record(search.best_f, best)
                yield "search"
            self.search_record = {"evaluations": search.evaluations, "generations": search.generation,
                                  "popsize": search.popsize, "final_sigma": search.sigma,
                                  "best_half_resolution_loss": search.best_f,
                                  "parameters": [scene_theta.NAMES[i] for i in moving]}
            self._check(r, best)

    def _pair_scan(self, r, theta: np.ndarray, current: float, scan: PairScan) -> Iterator[str]:
        """The components `scan.pair` scanned together on a PAIR_POINTS^2 grid over +-PAIR_SPAN default
        perturbations around the start, every free component of the `scan.reset` groups at the start's (the tile's
        height too, which neither the search nor a scan moves, but a polish can: t = 0.8 seed 5 left it 0.18 units
        off) and the rest as in theta;
        the grid's best is kept if its full-resolution image loss is below `current` (theta's). One step, none if
        a component of the pair is not searched; returns (theta, its image loss)."""
        moving, scale = self._searched()
        names = [scene_theta.NAMES[i] for i in moving]
        if self.settings.pair_points == 0 or not all(n in names for n in scan.pair):
            return theta, current
        picked = [names.index(n) for n in scan.pair]
        axes, steps = moving[picked], scale[picked]
        base = np.array(theta, np.float64)
        free = self.free_now()
        at_start = free[np.isin([scene_theta.group_of(int(i)) for i in free], scan.reset)]
        base[at_start] = self.start[at_start]
        base[axes] = self.start[axes]
        lo, hi = scene_theta.limits()
        loss = half_resolution_loss(self.target, self.camera) if scan.half_resolution \
            else (lambda candidate: image_loss(r, candidate, self.target))
        best, best_value = base, math.inf
        grid = np.linspace(-PAIR_SPAN, PAIR_SPAN, self.settings.pair_points)
        for a in grid:
            for b in grid:
                candidate = base.copy()
                candidate[axes] += np.array([a, b]) * steps
                candidate = np.clip(candidate, lo, hi)
                value = loss(candidate)
                if value < best_value:
                    best, best_value = candidate, value
        value = image_loss(r, best, self.target) if scan.half_resolution else best_value
        if value < current:
            theta, current = best, value
        self._record(current, theta)
        self._check(r, theta, value=current)
        yield "scan"
        return theta, current

    def _scan(self, r, theta: np.ndarray, label: str) -> Iterator[str]:
        """One parameter at a time (theta's order), the full-resolution image loss on `scan_grid` (around the
        current value and around the start); each moves to its grid's lowest point.
        Returns the scanned theta (the polish starts there; the best iterate is kept as ever)."""
        s = self.settings
        self.marks.append((self.step_count, label))
        lo, hi = scene_theta.limits()
        theta = np.array(theta, np.float64)  # its own: the scan moves it in place, and the caller's is the best iterate
        current = image_loss(r, theta, self.target)
        for scan in PAIR_SCANS:
            theta, current = yield from self._pair_scan(r, theta, current, scan)
        for i, scale in zip(*self._searched()):
            best = theta[i]
            for value_i in scan_grid(theta[i], self.start[i], scale, s.scan_points):
                theta[i] = np.clip(value_i, lo[i], hi[i])
                value = image_loss(r, theta, self.target)
                if value < current:
                    current, best = value, theta[i]
            theta[i] = best
            self._record(current, theta)
            self._check(r, theta, value=current)
            yield "scan"
        r.set_theta(theta)
        return theta

    def _multistart(self, theta: np.ndarray) -> Iterator[str]:
        s = self.settings
        yaw = scene_theta.NAMES.index(SPREAD_NAME)
        starts = s.starts if yaw in self.free and yaw not in self.held else 1
        if starts == 1:
            return theta
        runs, candidates = [], spread_starts(theta, starts)
        short = min(s.start_iterations, s.iterations)
        for k, (offset, candidate) in enumerate(zip(spread_offsets(starts), candidates)):
            self.marks.append((self.step_count, f"start {k + 1}/{starts} (yaw {offset:+g} deg)"))
            inv = InverseRender(self.target, candidate, self.truth, self.width, self.height, self.camera, s, self.held)
            try:
                while inv.iteration < short:
                    inv.step()
                    if inv.read_due(short):
                        for loss, theta in inv.read():
                            self._record(loss, theta)
                    yield "multi-start"
                runs.append({"yaw_offset_deg": offset, "iterations": inv.iteration,
                             "image_loss": self._check(inv.r, inv.theta())})
            finally:
                self._count_adam(inv)
                inv.destroy()
        picked = min(range(len(runs)), key=lambda k: runs[k]["image_loss"])
        self.multistart = {"starts": starts, "iterations": short, "runs": runs, "picked": picked,
                           "spread": {"parameter": SPREAD_NAME, "step_deg": SPREAD_DEG}}
        return candidates[picked]

    def _adam(self, start: np.ndarray, s: InvertSettings, label: str) -> Iterator[str]:
        """Adam from `start` for s.iterations; returns this run's best checked iterate (the polish starts there)."""
        self.marks.append((self.step_count, label))
        inv = InverseRender(self.target, start, self.truth, self.width, self.height, self.camera, s, self.held)
        best, best_loss = np.array(start, np.float64), math.inf
        try:
            while inv.iteration < s.iterations:
                inv.step()  # launches only: the host reads the iterations at each check (every s.check_every)
                if 0 < inv.iteration < s.iterations and inv.iteration % max(s.iterations // s.cycles, 1) == 0:
                    self.marks.append((self.step_count + inv.unread, "Adam: warm restart of the schedule"))
                if inv.read_due(s.iterations):
                    for loss, theta in inv.read():
                        self._record(loss, theta)
                    moved = np.max(np.abs(theta - self.start) / tolerance_scale(self.start))
                    value = self._check(inv.r, theta, candidate=moved <= DIVERGE_TOLERANCES)
                    inv.r.set_theta(theta)
                    if not math.isfinite(value) or value > DIVERGE_FACTOR * self.start_loss \
                            or moved > DIVERGE_TOLERANCES:
                        self.diverged_at = self.step_count
                        self.marks.append((self.step_count, "Adam diverged: back to the best iterate"))
                        yield "Adam"
                        return self.best_theta
                    if value < best_loss:
                        best, best_loss = theta, value
                yield "Adam"
        finally:
            self._count_adam(inv)
            inv.destroy()
        return best

    def _count_adam(self, inv: InverseRender) -> None:
        """Add a finished Adam run's iterations to `adam_record`; warn of those whose gradient was not finite."""
        self.adam_record["iterations"] += inv.iteration
        self.adam_record["discarded_gradients"] += inv.skipped
        if inv.skipped:
            log.warning("%d of %d Adam iterations had a loss or gradient that was not finite: they moved by "
                        "momentum only", inv.skipped, inv.iteration)

    def _polish(self, r, start: np.ndarray) -> Iterator[str]:
        """Levenberg-Marquardt from `start` on Huber's loss, its threshold lowered in stages (`POLISH_THRESHOLDS`)
        whenever a stage stalls, then on the pixels the render differentiates (`unpredicted_pixels`, MASK_ROUNDS);
        a step is kept only if its stage's loss falls. At most s.lm_iterations steps."""
        s = self.settings
        if s.lm_iterations == 0:
            return
        self.marks.append((self.step_count, "Levenberg-Marquardt"))
        self._release_determined(self._identify(r, start))
        theta = np.array(start, np.float64)
        state = PolishState()
        for threshold in POLISH_THRESHOLDS:
            theta = yield from self._lm_stage(r, theta, threshold, state)
        self.marks.append((self.step_count, "Levenberg-Marquardt, unpredicted pixels left out"))
        for _ in range(MASK_ROUNDS):
            before = state.taken
            theta = yield from self._lm_stage(r, theta, HUBER, state, masked=True)
            if state.taken == before:
                break
        self.lm_record = {"steps": self.lm_record.get("steps", 0) + state.taken, "final_damping": state.damping,
                          "residual_loss": state.loss, "unpredicted_pixels": state.left_out,
                          "last_step_in_tolerances":
                          None if state.last_step is None else float(state.last_step.max())}

    def _lm_stage(self, r, theta: np.ndarray, threshold: float, state: PolishState,
                  masked: bool = False) -> Iterator[str]:
        """Levenberg-Marquardt steps on Huber's loss (`threshold`) until a step fails or its trial is smaller than
        SETTLED_STEP (not rendered), counted in `state`; returns the last theta. Over every pixel at full and half
        resolution, or (`masked`) at full resolution over those `unpredicted_pixels` does not flag at theta, from the
        stage's first Jacobian. A stage entered with the polish's steps spent does nothing (its Jacobian and probes
        would be thrown away)."""
        if state.taken >= self.settings.lm_iterations:
            return theta
        free = self.free_now()
        lo, hi = scene_theta.limits()
        target = self.target.astype(np.float64)
        levels, pick = LM_LEVELS, slice(None)
        r.set_theta(theta)
        first = r.image_jacobian()  # the first step's (no render if the last stage's last step left it on the tape)
        if masked:
            left_out = unpredicted_pixels(r, theta, *first, free)
            state.left_out = int(left_out.sum())
            levels, pick = (0,), np.repeat(~left_out.reshape(-1), 3)  # the residual is (H, W, 3) flattened
        scale = residual_scale(target.shape, levels)[pick]

        def residual(image: np.ndarray, jac: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
            res, jf = pyramid_residual(image, target, jac, levels)
            return res[pick], None if jf is None else jf[pick]

        def value(image: np.ndarray) -> float:
            res, _ = residual(image, None)
            return huber_loss(res, scale, threshold) if np.all(np.isfinite(res)) else math.inf

        damping, current = 1e-3, value(first[0])
        while state.taken < self.settings.lm_iterations:
            if first is None:
                r.set_theta(theta)
                first = r.image_jacobian()
            (image, jac), first = first, None
            res, jf = residual(image, jac[..., free])
            w = huber_weights(res, scale, threshold)
            weighted_jac, weighted_res = jf * w[:, None], res * w  # the same for every damping tried
            tolerance = tolerance_scale(theta)[free]
            improved = False
            while damping < 1e8:
                step = lm_step(weighted_jac, weighted_res, damping)
                trial = np.array(theta)
                trial[free] = np.clip(trial[free] + step, lo[free], hi[free])
                size = np.abs(trial - theta)[free] / tolerance
                if size.max() < SETTLED_STEP:
                    break  # not rendered: every larger damping gives a smaller step still
                image = plain_image(r, trial, keep=True)  # kept: if accepted, its Jacobian needs no second render
                trial_value = value(image)
                if trial_value < current:
                    state.last_step = size
                    theta, current, improved, accepted = trial, trial_value, True, image
                    damping = max(damping / 3.0, 1e-7)
                    break
                damping *= 4.0
            if not improved:
                break
            state.taken += 1
            self._record(current, theta)
            self._check(r, theta, image=accepted)
            yield "Levenberg-Marquardt"
        state.damping, state.loss = damping, current
        return theta

    def _image_floor(self, ident: Identifiability) -> tuple[float, set[int]]:
        """The image loss (Huber's, as `image_loss`) a one-tolerance error of the least visible determined
        parameter would leave, and the determined (not held) components."""
        determined = {int(self.free[k]) for k in np.flatnonzero(ident.determined)} - set(self.held)
        visible = [k for k in range(len(self.free)) if int(self.free[k]) in determined]
        floor = 0.5 * min((ident.robust[k] for k in visible), default=0.0) / (3.0 * self.width * self.height)
        return floor, determined

    def _image_met(self, ident: Identifiability) -> bool:
        return self.best_loss <= self.target_noise + self._image_floor(ident)[0]

    def host_cost_record(self) -> dict:
        """Launches and host syncs per step (engine.host_costs), per kind of step; the per-iteration figures are
        the gradient method's step (the polish's, Adam's with method adam)."""
        per_kind = {name: costs.record() for name, costs in self.host_costs.items()}
        gradient = per_kind.get("Adam" if self.settings.method == "adam" else "Levenberg-Marquardt", {})
        return {"launches_per_iteration": gradient.get("launches_per_iteration"),
                "host_syncs_per_iteration": gradient.get("host_syncs_per_iteration"),
                "host_costs": {name: {"launches_per_step": rec["launches_per_iteration"],
                                      "host_syncs_per_step": rec["host_syncs_per_iteration"], **rec["host_costs"],
                                      "counted": "every step"}
                               for name, rec in per_kind.items()}}

    # -- the verdict -----------------------------------------------------------------------------------
    def verdict(self) -> dict:
        """status, the criteria that decided it, per-parameter identifiability and errors (module docstring)."""
        if not self.finished:
            raise RuntimeError("Recovery.verdict: run steps() first")
        theta = self.best_theta
        ident = self.identify_final or self.identify_start
        floor, determined = self._image_floor(ident)
        if self.identify_truth is not None:
            # the truth is judged where the target or the result shows a parameter: a fit that moved the letter out
            # of view has not recovered it, though the result's picture no longer determines it
            determined |= {int(self.free[k]) for k in np.flatnonzero(self.identify_truth.determined)}
        unidentifiable = [scene_theta.NAMES[i] for i in self.free if i not in determined]
        noise = self.target_noise
        image_ok = self._image_met(ident)
        record = {
            "image_criterion": {"final_loss": self.best_loss, "start_loss": self.start_loss,
                                "loss_of_one_tolerance": floor, "target_noise": noise, "met": bool(image_ok),
                                "orders": (math.log10(self.start_loss / self.best_loss) if self.best_loss > 0
                                           else math.inf)},
            "last_step_in_tolerances": self.lm_record.get("last_step_in_tolerances"),
            "unidentifiable": unidentifiable,
            "identifiability": {scene_theta.NAMES[int(i)]: {
                "determined": int(i) in determined, "sensitivity": float(ident.sensitivity[k]),
                "alone": float(ident.alone[k]), "held_at_start": int(i) in self.held}
                for k, i in enumerate(self.free)},
            "identifiability_threshold": NOISE_FLOOR,
            "tolerances": TOLERANCES,
        }
        off: dict[str, float] = {}
        if self.truth is not None:
            errors = parameter_errors(theta, self.truth)
            off = {scene_theta.NAMES[i]: float(errors[i]) for i in sorted(determined)
                   if errors[i] > TOLERANCES[scene_theta.group_of(i)]}
            record["truth_criterion"] = {"met": not off, "off": off}
            converged = not off
            record["decided_by"] = "truth: every determined parameter within its tolerance"
        else:
            converged = image_ok
            record["decided_by"] = "image: loss below that of a one-tolerance error"
        if self.interrupted:
            status = "interrupted"
        elif converged:
            status = "converged"
        elif self.diverged_at is not None:
            status = "diverged"
        else:
            status = "not_converged"
        return {"status": status, **record, "off": off, "diverged_at_step": self.diverged_at}


def verdict_line(verdict: dict) -> str:
    """One line: the status and what is off by how much (or the image criterion when the truth is unknown)."""
    status = verdict["status"]
    held = [n for n in verdict["unidentifiable"] if verdict["identifiability"][n]["held_at_start"]]
    unseen = [n for n in verdict["unidentifiable"] if n not in held]  # free, where neither target nor result shows it
    tail = (f"; unidentifiable (held at the start): {', '.join(held)}" if held else "") \
        + (f"; unidentifiable (not shown by the target): {', '.join(unseen)}" if unseen else "")
    if status == "converged":
        return f"CONVERGED{tail}"
    off = verdict["off"]
    units = {g: scene_theta.UNITS[g] for g in scene_theta.GROUPS}
    if off:
        what = ", ".join(f"{name} off by {value:.3g} {units[scene_theta.group_of(scene_theta.NAMES.index(name))]}"
                         f" (tolerance {TOLERANCES[scene_theta.group_of(scene_theta.NAMES.index(name))]:g})"
                         for name, value in off.items())
    else:
        image = verdict["image_criterion"]
        bound = image["target_noise"] + image["loss_of_one_tolerance"]
        what = (f"image loss {image['final_loss']:.3e} above {bound:.3e} (the target's noise plus the loss a "
                f"one-tolerance error would leave)")
    return f"{status.upper().replace('_', ' ')}: {what}{tail}"
