"""What the desktop app runs inside its backend workers (called by "module:function").

These functions execute in a `BackendWorker` process, never in the UI process (see
`app.ui.links` for why). They are host glue over the engine's public API: build the
ray-march frame for the panel, step the shape fit, read its tape.
No device math here. The fit session lives in this module's globals (the renderer in
`app.scenes.robot_arm`'s), which is what a long-lived worker process is for.

Each function takes numpy-compatible keyword inputs and returns a dict of arrays.
"""
from __future__ import annotations

import contextlib
import math
import time

import numpy as np

_fit = None  # app.scenes.shape_fit.ShapeFit, replaced by every reset
_recovery = None  # app.scenes.inverse_render.Recovery, replaced by every invert_reset
_steps = None  # its steps() generator, pulled by invert_run
_phase = ""  # the phase the generator named last
_done = False  # the generator is exhausted (or raised)
_verdict: dict | None = None  # Recovery.verdict() once done ({} when the generator raised)
_shipped = 0  # the steps whose losses and errors a snapshot has carried
_images_at = -math.inf  # perf_counter when a snapshot last carried images
_images_of: tuple[int, bool] = (-1, False)  # the (step, finished) they showed
INVERT_GROUPS = ("joints", "gripper", "letter", "letter_angles")  # what the panel perturbs and recovers


def render_frame(t: float, yaw: float, pitch: float, distance: float, width: int, height: int,
                 linear: bool = False, center: tuple[float, float, float] | None = None, lanes: int = 0) -> dict:
    """The "raymarch_frame" computation (timeline `t` in [0, 1], orbit camera around `center`), for display.

    Returns `srgb` (H, W, 3) uint8, `ms` (worker-side render time) and, with
    `linear=True`, the (H, W, 3) float32 linear image that the parity panel compares
    against the parity backend's "raymarch_frame" output. lanes: rays per thread (0: the backend's packet width;
    the image is the same bit for bit at any width).
    """
    from app.scenes.robot_arm import raymarch_frame
    from engine.image_io import srgb8
    from engine.render import Camera

    target = Camera.target if center is None else tuple(float(v) for v in center)
    out = raymarch_frame(float(t), int(width), int(height), azimuth=float(yaw), elevation=float(pitch),
                         distance=float(distance), target=target, lanes=int(lanes))
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
    stalls more). Its second step, unprofiled, is counted (engine.host_costs: launches and host
    syncs, what an iteration costs the host) for the panel too. A batch that ran no step carries
    no tape record, one of a single step no counts."""
    from engine.host_costs import count_host_costs

    if _fit is None:
        raise RuntimeError("no fit: reset first")
    started = time.perf_counter()
    first, steps, timed, counted = _fit.iteration, 0, {}, {}
    while (steps < int(max_steps) and _fit.iteration < int(until)
           and not (steps and time.perf_counter() - started >= float(budget_s))):
        _fit.tape.profile = not steps
        with count_host_costs() if steps == 1 else contextlib.nullcontext() as costs:
            _fit.step()
        steps += 1
        if costs is not None:
            counted = {"host_iteration": np.int64(_fit.iteration - 1), "host_launches": np.int64(costs.launches),
                       "host_kernels": np.int64(costs.kernels), "host_syncs": np.int64(costs.host_syncs),
                       "host_sync_sites": np.array(sorted(costs.sync_sites), dtype=str)}
        timed = timed or _tape_record(_fit)
    _fit.tape.profile = True  # evaluations outside a batch (a gradient comparison) stay timed
    losses = _fit.losses[first:]  # the batch's losses, read in one wait (the fit reads every sync_every-th step too)
    return {**_snapshot(_fit, losses, timed), **counted, "seconds": np.float64(time.perf_counter() - started)}


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


def invert_reset(t: float, width: int, height: int, perturbation: float, seed: int) -> dict:
    """Start a recovery: the one `python -m app invert` runs (app.scenes.inverse_render.Recovery with its default
    schedule: identify, the CMA-ES search, Levenberg-Marquardt, scans while the image says the fit is not there)
    of the pose groups
    (INVERT_GROUPS). Target = the differentiable render of the timeline's frame at t; start = its parameters
    moved by `perturbation` times the default perturbation of those groups (seeded). Nothing runs yet:
    `invert_run` pulls the recovery's steps."""
    global _recovery, _steps, _phase, _done, _verdict, _shipped
    from app.scenes.inverse_render import InvertSettings, Recovery, load_kernels, render_target
    from app.scenes.robot_arm import theta_at
    from engine import scene_theta

    if _steps is not None:
        _steps.close()  # the phase under way frees its optimiser's fields (its `finally`)
    _recovery = _steps = None
    truth = theta_at(float(t))
    magnitudes = {g: scene_theta.DEFAULT_PERTURB[g] * float(perturbation) for g in INVERT_GROUPS}
    start = scene_theta.perturb(truth, magnitudes, int(seed))
    load_kernels(start)  # here, where the status bar says the renderer compiles, not in the first steps
    target = render_target(truth, int(width), int(height))
    # invert's own schedule: a step (a search generation, a polish step, one parameter's scan) takes 0.1-1 s, in
    # the worker, while the window keeps drawing
    settings = InvertSettings(groups=INVERT_GROUPS)
    rec = Recovery(target, start, truth, int(width), int(height), settings=settings)
    _recovery, _steps, _phase, _done, _verdict, _shipped = rec, rec.steps(), "", False, None, 0
    return _invert_snapshot(images=True)


def invert_run(max_steps: int, budget_s: float, image_every_s: float = 0.0) -> dict:
    """Pull the recovery's steps until `max_steps` more are taken, it has ended, or (after one step) `budget_s`
    seconds have passed. Work that takes no step (the identifiability at the start) runs with the step after it,
    so one Step is one step. The snapshot carries the images when `image_every_s` seconds have passed since the
    last ones, and once more when the recovery has ended (they show its result): a render each time (about 60 ms
    at 256x128), not one every 0.3 s batch."""
    global _phase, _done, _verdict
    if _recovery is None:
        raise RuntimeError("no inversion: reset first")
    rec = _recovery
    started = time.perf_counter()
    first = rec.step_count
    while not _done and rec.step_count - first < int(max_steps) \
            and not (rec.step_count > first and time.perf_counter() - started >= float(budget_s)):
        try:
            _phase = next(_steps)
        except StopIteration:
            _done = True
        except BaseException:
            _done = True  # the generator is closed: the error is this call's answer, the panel says "failed"
            raise
    if _done and _verdict is None:
        _verdict = rec.verdict() if rec.finished else {}
    shown = (rec.step_count, rec.finished)
    images = shown != _images_of and (_done or time.perf_counter() - _images_at >= float(image_every_s))
    return {**_invert_snapshot(images), "seconds": np.float64(time.perf_counter() - started)}


def _shown_theta(rec) -> np.ndarray:
    """The theta the panel shows: the last step's while the recovery runs, its result (the best iterate) after."""
    return rec.best_theta if rec.finished else rec.current


def invert_gradient(theta: np.ndarray | None = None, weight: np.ndarray | None = None) -> dict:
    """d loss / d theta of the recovery's view and target (full-resolution L2, 1-pixel silhouettes) at `theta`
    (default: the theta the panel shows) over the pixels `weight` (H, W) float32 weighs (default: all), with the
    rendered image and the inputs of the "render_gradient" computation that redoes it on another backend.

    The shared renderer is then put back as the recovery's phase under way needs it between two steps: its
    view, compared image and target as the phase set them, the plain loss, and theta at the last step's
    (Recovery.current: the renderer's theta at every yield; the Adam steps re-set their loss settings every
    step, and the Levenberg-Marquardt steps their theta too)."""
    from app.scenes.inverse_render import renderer
    from engine.diff_render import run_render_gradient

    if _recovery is None:
        raise RuntimeError("no inversion: reset first")
    rec = _recovery
    current = _shown_theta(rec)
    inputs = {"theta": current if theta is None else np.asarray(theta, np.float64), "target": rec.target,
              "weight": np.ones(rec.target.shape[:2], np.float32) if weight is None
              else np.asarray(weight, np.float32), "width": np.int64(rec.width), "height": np.int64(rec.height),
              "azimuth": np.float64(rec.camera.azimuth), "elevation": np.float64(rec.camera.elevation),
              "distance": np.float64(rec.camera.distance), "compare": np.array(rec.settings.compare)}
    out = run_render_gradient(**inputs)
    r = renderer()
    r.set_view(rec.camera, rec.width, rec.height)  # (resets the compared image and forgets the target)
    r.set_compare(rec.settings.compare)
    r.set_target(rec.target)
    r.set_loss("l2", 1, 1.0)
    r.set_theta(current)
    return {"grad": out["grad"], "loss": out["loss"], "image": out["image"], "iteration": np.int64(rec.step_count),
            "at": inputs}


def _current_image(rec, theta: np.ndarray) -> np.ndarray:
    """The plain full-resolution image (1-pixel silhouettes) at `theta`, linear RGB: the recovery's own if its last
    check rendered it (`Recovery.image_at`: every polish step's), else rendered, since what the shared renderer
    last drew need not be theta's (a scan's last grid point, a probe of the unpredicted pixels). Every phase sets
    the renderer's theta and loss settings itself before it renders again."""
    from app.scenes.inverse_render import plain_image, renderer

    image = rec.image_at(theta)
    return plain_image(renderer(), theta) if image is None else image


def _invert_snapshot(images: bool) -> dict:
    """The recovery as arrays: the steps since the last snapshot (`steps_from`: the first one's index; their
    losses and per-group errors), the pose parameters in display units, the phase marks, the phase, `done`,
    `status` ("running" until done, then the verdict's) and the verdict line; with `images`, the target | current
    | |difference| images (sRGB uint8) at the theta the panel shows."""
    global _shipped, _images_at, _images_of
    from app.scenes.invert import group_error_series
    from app.scenes.inverse_render import TOLERANCES, side_by_side, verdict_line
    from engine import scene_theta

    rec = _recovery
    theta = _shown_theta(rec)
    out = {}
    if images:
        panel = side_by_side(_current_image(rec, theta), rec.target)
        w = rec.width
        out.update(target=panel[:, :w], image=panel[:, w:2 * w], diff=panel[:, 2 * w:])
        _images_at, _images_of = time.perf_counter(), (rec.step_count, rec.finished)
    pose = [i for g in INVERT_GROUPS for i in range(scene_theta.GROUPS[g].start, scene_theta.GROUPS[g].stop)]
    new = rec.errors[_shipped:]
    series = group_error_series(new, INVERT_GROUPS)
    if _done:
        status = _verdict.get("status", "failed")
        line = verdict_line(_verdict) if _verdict else "the recovery failed: Reset to start over"
    else:
        status, line = "running", ""
    out.update({
        "names": np.array([scene_theta.NAMES[i] for i in pose]),
        "name_groups": np.array([scene_theta.group_of(i) for i in pose]),
        "units": np.array([scene_theta.UNITS[scene_theta.group_of(i)] for i in pose]),
        "true": np.array([scene_theta.display(i, rec.truth[i]) for i in pose]),
        "start": np.array([scene_theta.display(i, rec.start[i]) for i in pose]),
        "current": np.array([scene_theta.display(i, theta[i]) for i in pose]),
        "errors": {g: np.float64(v) for g, v in scene_theta.group_errors(theta, rec.truth).items() if g in INVERT_GROUPS},
        "steps_from": np.int64(_shipped), "losses": np.asarray(rec.losses[_shipped:], np.float64),
        "groups": np.array(INVERT_GROUPS), "group_units": np.array([scene_theta.UNITS[g] for g in INVERT_GROUPS]),
        "tolerances": np.array([TOLERANCES[g] for g in INVERT_GROUPS], np.float64),
        "error_rows": np.array([series[g] for g in INVERT_GROUPS], np.float64).T.reshape(len(new), len(INVERT_GROUPS)),
        "mark_steps": np.array([step for step, _ in rec.marks], np.int64),
        "mark_texts": np.array([text for _, text in rec.marks], dtype=str),
        "iteration": np.int64(rec.step_count),
        "phase": np.array(_phase), "done": np.bool_(_done), "status": np.array(status), "verdict_line": np.array(line),
    })
    _shipped = rec.step_count
    return out
