"""What the desktop app runs inside its backend workers (called by "module:function").

These functions execute in a `BackendWorker` process, never in the UI process (see
`app.ui.links` for why). They are host glue over the engine's public API: build the
ray-march frame for the panel, step the shape fit, read its tape.
No device math here. The fit session lives in this module's globals (the renderer in
`app.scenes.robot_arm`'s), which is what a long-lived worker process is for.

Each function takes numpy-compatible keyword inputs and returns a dict of arrays.
"""
from __future__ import annotations

import time

import numpy as np

_fit = None  # app.scenes.shape_fit.ShapeFit, replaced by every reset
_inverse = None  # app.scenes.invert.InverseRender, replaced by every invert_reset
INVERT_GROUPS = ("joints", "gripper", "letter", "letter_angles")  # what the panel perturbs and recovers


def render_frame(t: float, yaw: float, pitch: float, distance: float, width: int, height: int,
                 linear: bool = False, center: tuple[float, float, float] | None = None) -> dict:
    """The "raymarch_frame" computation (timeline `t` in [0, 1], orbit camera around `center`), for display.

    Returns `srgb` (H, W, 3) uint8, `ms` (worker-side render time) and, with
    `linear=True`, the (H, W, 3) float32 linear image that the parity panel compares
    against the parity backend's "raymarch_frame" output.
    """
    from app.scenes.robot_arm import raymarch_frame
    from engine.image_io import srgb8
    from engine.render import Camera

    target = Camera.target if center is None else tuple(float(v) for v in center)
    out = raymarch_frame(float(t), int(width), int(height), azimuth=float(yaw), elevation=float(pitch),
                         distance=float(distance), target=target)
    frame = {"srgb": srgb8(out["rgb"]), "ms": out["ms"]}
    if linear:
        frame["linear"] = out["rgb"]
    return frame


def fit_reset(target: str, subdiv: int, lr: float, smooth: float, smooth_end: float, schedule_iters: int) -> dict:
    """Start a new fit of an icosphere to `target` (a built-in name or a mesh file path).

    The Laplacian step falls linearly from `smooth` to `smooth_end` over `schedule_iters`. A target
    that fails to load (a bad file) raises before anything is allocated and leaves the current fit
    as it was, so the app keeps a working fit beside the error."""
    global _fit
    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit(str(target), subdiv=int(subdiv), lr=float(lr), smooth=float(smooth), profile=True,
                   smooth_end=float(smooth_end), schedule_iters=int(schedule_iters))
    if _fit is not None:
        _fit.destroy()
    _fit = fit
    fit.evaluate()  # loss and gradient at the sphere, no update: compiles the kernels...
    fit.evaluate()  # ...so that the tape panel's first timings are launches, not compiles
    return {**_snapshot(fit, [], _tape_record(fit)), "faces": np.asarray(fit.faces, dtype=np.int32),
            "target_vertices": np.asarray(fit.target.vertices, dtype=np.float32),
            "target_faces": np.asarray(fit.target.faces, dtype=np.int32)}


def fit_run(max_steps: int, budget_s: float, until: int = 2**31) -> dict:
    """Step the fit until `max_steps` steps, iteration `until`, or (after one step) `budget_s` seconds.

    Only the batch's first step is profiled for the tape panel: profiling syncs after every
    launch (measured on the cpu: 2.85 against 2.57 ms per spot iteration; a GPU's launch queue
    stalls more). A batch that ran no step carries no tape record."""
    if _fit is None:
        raise RuntimeError("no fit: reset first")
    started = time.perf_counter()
    losses, timed = [], {}
    while (len(losses) < int(max_steps) and _fit.iteration < int(until)
           and not (losses and time.perf_counter() - started >= float(budget_s))):
        _fit.tape.profile = not losses
        losses.append(float(_fit.step()))
        timed = timed or _tape_record(_fit)
    _fit.tape.profile = True  # evaluations outside a batch (a gradient comparison) stay timed
    return {**_snapshot(_fit, losses, timed), "seconds": np.float64(time.perf_counter() - started)}


def fit_gradient() -> dict:
    """d loss / d vertices at the current mesh, with what `fit_gradient_at` needs to redo it elsewhere."""
    if _fit is None:
        raise RuntimeError("no fit: reset first")
    grad = _fit.gradient()
    return {"grad": grad, "loss": np.float64(_fit.loss.value[None]), "iteration": np.int64(_fit.iteration),
            "at": {"target": np.array(_fit.target_name), "subdiv": np.int64(_fit.subdiv),
                   "n_samples": np.int64(_fit.n_samples), "seed": np.int64(_fit.seed),
                   "vertices": _fit.x.to_numpy()}}


def fit_export(path: str) -> dict:
    """Write the current fitted mesh (atomically; OBJ, PLY, STL or GLB by the extension of `path`)."""
    if _fit is None:
        raise RuntimeError("no fit: reset first")
    _fit.export_mesh(path)
    return {"path": np.array(str(path))}


def _tape_record(fit) -> dict:
    """The launches of the fit's last (profiled) evaluation and the iteration it evaluated, as arrays."""
    entries = fit.tape.entries
    return {
        "tape_iteration": np.int64(max(len(fit.losses) - 1, 0)),  # a step's evaluation precedes its update
        "tape_names": np.array([entry.name for entry in entries], dtype=str),
        "tape_forward_s": np.array([entry.forward_s or 0.0 for entry in entries], dtype=np.float64),
        "tape_backward_s": np.array([entry.backward_s or 0.0 for entry in entries], dtype=np.float64),
    }


def _snapshot(fit, losses: list[float], tape: dict) -> dict:
    """The fit's mesh, its new losses and a `_tape_record`, as arrays."""
    return {"vertices": np.asarray(fit.vertices(), dtype=np.float32),
            "losses": np.asarray(losses, dtype=np.float64), "iteration": np.int64(len(fit.losses)), **tape}


def invert_reset(t: float, width: int, height: int, perturbation: float, seed: int, iterations: int) -> dict:
    """Start an inversion: target = the differentiable render of the timeline's frame at t; start = its
    parameters moved by `perturbation` times the default perturbation of the pose groups (seeded). One start: the
    panel steps it interactively, without `invert`'s multi-start (app.scenes.invert.pick_start)."""
    global _inverse
    from app.scenes.invert import InverseRender, InvertSettings, render_target
    from app.scenes.robot_arm import theta_at
    from engine import scene_theta

    if _inverse is not None:
        _inverse.destroy()
    _inverse = None
    truth = theta_at(float(t))
    target = render_target(truth, int(width), int(height))
    magnitudes = {g: scene_theta.DEFAULT_PERTURB[g] * float(perturbation) for g in INVERT_GROUPS}
    start = scene_theta.perturb(truth, magnitudes, int(seed))
    settings = InvertSettings(iterations=int(iterations), groups=INVERT_GROUPS)
    _inverse = InverseRender(target, start, truth, int(width), int(height), settings=settings)
    return _invert_snapshot([])


def invert_run(max_steps: int, budget_s: float) -> dict:
    """Step the inversion until `max_steps` steps, its last iteration, or (after one step) `budget_s` seconds."""
    if _inverse is None:
        raise RuntimeError("no inversion: reset first")
    started = time.perf_counter()
    losses = []
    while (len(losses) < int(max_steps) and _inverse.iteration < _inverse.settings.iterations
           and not (losses and time.perf_counter() - started >= float(budget_s))):
        losses.append(_inverse.step())
    return {**_invert_snapshot(losses), "seconds": np.float64(time.perf_counter() - started)}


def invert_gradient(theta: np.ndarray | None = None, weight: np.ndarray | None = None) -> dict:
    """d loss / d theta of the inversion's view and target (full-resolution L2, 1-pixel silhouettes) at `theta`
    (default: its current theta) over the pixels `weight` (H, W) float32 weighs (default: all), with the
    rendered image and the inputs of the "render_gradient" computation that redoes it on another backend.
    The inversion's own theta, compared image and loss settings are put back afterwards."""
    from engine.diff_render import run_render_gradient

    if _inverse is None:
        raise RuntimeError("no inversion: reset first")
    current = _inverse.theta()
    inputs = {"theta": current if theta is None else np.asarray(theta, np.float64), "target": _inverse.target,
              "weight": np.ones(_inverse.target.shape[:2], np.float32) if weight is None
              else np.asarray(weight, np.float32), "width": np.int64(_inverse.width), "height": np.int64(_inverse.height)}
    out = run_render_gradient(**inputs)
    _inverse.r.set_theta(current)
    _inverse.r.set_compare(_inverse.settings.compare)
    _inverse.r.set_loss(_inverse.settings.loss, _inverse.settings.levels, _inverse.settings.edge_start)
    _inverse.r.set_target(_inverse.target)
    return {"grad": out["grad"], "loss": out["loss"], "image": out["image"], "iteration": np.int64(_inverse.iteration),
            "at": inputs}


def _invert_snapshot(losses: list[float]) -> dict:
    """The inversion's images (sRGB uint8), pose parameters in display units and new losses, as arrays."""
    from app.scenes.invert import side_by_side
    from engine import scene_theta

    inv = _inverse
    current = inv.current_image()
    panel = side_by_side(current, inv.target)
    w = inv.width
    pose = [i for g in INVERT_GROUPS for i in range(scene_theta.GROUPS[g].start, scene_theta.GROUPS[g].stop)]
    theta = inv.theta()
    errors = scene_theta.group_errors(theta, inv.truth)
    return {"image": panel[:, :w], "target": panel[:, w:2 * w], "diff": panel[:, 2 * w:],
            "names": np.array([scene_theta.NAMES[i] for i in pose]),
            "units": np.array([scene_theta.UNITS[scene_theta.group_of(i)] for i in pose]),
            "true": np.array([scene_theta.display(i, inv.truth[i]) for i in pose]),
            "start": np.array([scene_theta.display(i, inv.start[i]) for i in pose]),
            "current": np.array([scene_theta.display(i, theta[i]) for i in pose]),
            "errors": {g: np.float64(errors[g]) for g in INVERT_GROUPS},
            "losses": np.asarray(losses, np.float64), "iteration": np.int64(inv.iteration)}
