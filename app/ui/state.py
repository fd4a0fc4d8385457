"""The desktop app's one state object: everything the panels show and edit.

Panels are functions of an `AppState`: they draw it and write the user's edits and
intents back into it (a camera angle, `fit.running`, a queued `Command`). They never
talk to a backend. `app.ui.controller` turns the state into requests for the backend
workers and writes their answers back, on the UI thread, once per frame. The state is
grouped by panel (`raymarch`, `fit`, `parity`, `tape`, `invert`) plus the app-wide fields; the
groups are plain parts of the one object, not separate owners.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from app.claims.thresholds import PIXEL_ATOL
from app.scenes.fit_settings import RECOMMENDED_ITERS, RECOMMENDED_LR, RECOMMENDED_SMOOTH, RECOMMENDED_SMOOTH_END

PANELS = ("raymarch", "fit", "parity", "tape", "invert")  # the dockable panels, by --panel name
UI_SCALES = (0.8, 2.0)  # the range of the View menu's UI scale (font size relative to the default)


@dataclass
class Command:
    """An intent a panel queues for the controller: `kind` names it, `args` carries its inputs."""

    kind: str  # "fit_reset", "fit_step", "fit_export", "fit_open", "parity_grad", "save_frame", "save_screenshot",
    #            "invert_reset", "invert_step", "render_grad"
    args: dict = field(default_factory=dict)


@dataclass
class Orbit:
    """An orbit camera around `center`: angles in degrees, distance in scene units."""

    yaw: float
    pitch: float
    distance: float
    center: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def pan(self, dx_px: float, dy_px: float, fov_y_deg: float, view_height_px: float) -> None:
        """Move `center` in the view plane so that the scene follows a mouse drag of (dx, dy) pixels."""
        yaw, pitch = math.radians(self.yaw), math.radians(self.pitch)
        offset = np.array([math.cos(pitch) * math.sin(yaw), math.sin(pitch), math.cos(pitch) * math.cos(yaw)])
        right = np.cross(-offset, [0.0, 1.0, 0.0])
        right /= max(float(np.linalg.norm(right)), 1e-9)
        up = np.cross(right, -offset)
        metres_per_px = 2.0 * self.distance * math.tan(math.radians(fov_y_deg) / 2.0) / max(view_height_px, 1.0)
        moved = np.asarray(self.center) + (up * dy_px - right * dx_px) * metres_per_px
        self.center = tuple(float(v) for v in moved)


RAYMARCH_HOME = Orbit(yaw=18.0, pitch=16.0, distance=5.4, center=(-0.3, 1.1, -0.45))  # engine.render.Camera's target
FIT_HOME = Orbit(yaw=30.0, pitch=20.0, distance=3.2)  # the distance is then framed to the meshes (FitView.auto_frame)


@dataclass
class RaymarchView:
    """The ray-march panel: timeline, camera, resolution and the frame on screen."""

    t: float = 0.45  # timeline position in [0, 1] (app.scenes.robot_arm): the arm carries the tile here
    cycle_s: float = 8.0  # seconds for the whole timeline at speed 1
    playing: bool = False
    speed: float = 1.0
    orbit: Orbit = field(default_factory=lambda: replace(RAYMARCH_HOME))
    res_scale: float = 1.0  # full-quality frames render at this fraction of the panel's pixels (1: every pixel)
    preview_scale: float = 0.25  # frames while dragging or playing render at this fraction
    view_px: tuple[int, int] = (0, 0)  # the image area of the panel, in window pixels
    interacting_until: float = 0.0  # perf_counter time until which frames stay at preview quality
    image: np.ndarray | None = None  # (H, W, 3) uint8 sRGB, the frame on screen
    image_version: int = 0
    image_is_full: bool = False
    ms_per_frame: float = 0.0  # worker-side render time of the last frame
    frames_rendered: int = 0
    linear: np.ndarray | None = None  # (H, W, 3) float32 linear RGB of the last full frame (for parity)
    linear_request: dict | None = None  # the render request that produced `linear`
    requested: dict | None = None  # the last render request sent: the frame on screen is final when it answered it
    error: str = ""  # why the last frame failed, shown in the panel; "" after a good frame

    def timing(self) -> str:
        """The last frame's render time as shown to the user (the worker compiles before its first frame)."""
        return f"{self.ms_per_frame:.0f} ms/frame"


@dataclass
class FitView:
    """The shape-fit panel: settings, run control, progress and the meshes."""

    target: str = "spot"  # one of app.scenes.fit_settings.TARGETS (built in) or a mesh file path
    path_input: str = ""  # the path typed (or picked) for "Open"
    subdiv: int = 3
    lr: float = RECOMMENDED_LR  # the settings measured best on the real targets (app.scenes.fit_settings)
    smooth: float = RECOMMENDED_SMOOTH
    smooth_end: float = RECOMMENDED_SMOOTH_END
    running: bool = False  # Start/Pause: the controller steps the fit while True
    max_iterations: int = RECOMMENDED_ITERS  # Start stops here (and a reset's smoothing schedule ends here)
    iteration: int = 0
    losses: list[float] = field(default_factory=list)
    iterations_per_s: float = 0.0
    vertices: np.ndarray | None = None  # (V, 3) float32, current mesh
    faces: np.ndarray | None = None  # (F, 3) int32
    target_vertices: np.ndarray | None = None
    target_faces: np.ndarray | None = None
    mesh_version: int = 0
    target_version: int = 0
    orbit: Orbit = field(default_factory=lambda: replace(FIT_HOME))
    auto_frame: bool = True  # the 3D view keeps both meshes in frame until the user zooms or pans
    frame_radius: float = 1.8  # radius around the origin that holds the target and the mesh
    export_path: str = "out/fit.obj"
    exported: str = ""  # the last file written, shown under the button
    ready: bool = False  # a fit exists in the worker (after the first reset answers)
    loaded_target: str = ""  # the target of the fit the worker holds (a failed reset keeps it)
    busy: bool = False  # a reset (target load + set-up) is in flight
    error: str = ""  # why the last reset/step failed, shown in the panel


@dataclass
class ParityView:
    """The parity panel: the last comparison of the primary and parity backends."""

    atol: float = PIXEL_ATOL
    status: str = "starting"  # "starting", "idle", "busy", or "unavailable: <why>"
    what: str = ""  # what the numbers below compare, e.g. "ray-march frame t=2.50 s, 320x200"
    share_within: float | None = None
    max_abs_err: float | None = None
    worst: str = ""
    heatmap: np.ndarray | None = None  # (H, W, 3) uint8: log10 |A - B| through a colour map
    heatmap_version: int = 0
    heatmap_log_range: tuple[float, float] = (-6.0, -2.0)  # log10 |A - B| at the colour bar's ends (from the data)
    worst_pixels: list[tuple[int, int, float]] = field(default_factory=list)  # (row, column, |A - B|), worst first
    hist_log_err: np.ndarray | None = None  # bin centres, log10 |A - B|
    hist_counts: np.ndarray | None = None
    compared_request: dict | None = None  # the render request behind the numbers
    grad_summary: str = ""  # parity of the current fit's gradients, when compared
    render_grad_summary: str = ""  # parity of the inverse render's gradient, when compared
    render_grad_stage: str = ""  # what the render-gradient comparison under way does now; "" when none is
    render_grad_started: float = 0.0  # perf_counter when it began
    error: str = ""  # why the last frame comparison failed; "" after a good one


@dataclass
class InvertView:
    """The inverse-render panel: the recovery of the scene's pose from a rendered target that `python -m app invert`
    runs (app.scenes.inverse_render.Recovery), stepped in the primary worker (app.ui.services.invert_*)."""

    t: float = 0.1  # the timeline frame that is the target
    perturbation: float = 1.0  # times the default start perturbation (joints 20 deg, gripper 0.03 m, letter 0.2 ...)
    seed: int = 2  # the claim pose_recovery's
    running: bool = False  # Start/Pause: the controller keeps sending batches while True
    iteration: int = 0  # steps taken (search generations, Levenberg-Marquardt steps and scans together)
    phase: str = ""  # the phase of the last step ("identify", "search", "Levenberg-Marquardt", "scan")
    done: bool = False  # the recovery ended (its verdict is in `status` and `verdict_line`)
    status: str = ""  # "running" until done, then the verdict's (converged, not_converged, diverged) or "failed"
    verdict_line: str = ""  # app.scenes.inverse_render.verdict_line, once done
    losses: list[float] = field(default_factory=list)  # per step: the loss that step's optimiser minimised
    marks: list[tuple[int, str]] = field(default_factory=list)  # (step, what began there): the phases
    groups: list[str] = field(default_factory=list)  # the recovered parameter groups
    group_units: list[str] = field(default_factory=list)  # their display units
    tolerances: list[float] = field(default_factory=list)  # a recovered group is within these of the truth
    group_errors: dict[str, list[float]] = field(default_factory=dict)  # per group, its largest error per step
    names: list[str] = field(default_factory=list)  # the pose parameters shown in the table
    name_groups: list[str] = field(default_factory=list)  # each one's group
    units: list[str] = field(default_factory=list)
    true: list[float] = field(default_factory=list)  # in display units (degrees, metres)
    start: list[float] = field(default_factory=list)
    current: list[float] = field(default_factory=list)  # the last step's (once done: the result, the best iterate)
    errors: dict = field(default_factory=dict)  # largest error per group of `current`, display units
    target: np.ndarray | None = None  # (H, W, 3) uint8 sRGB
    image: np.ndarray | None = None  # the current render
    diff: np.ndarray | None = None  # |current - target|, amplified
    image_version: int = 0
    image_iteration: int = 0  # the step the images show (they come with some batches only)
    iterations_per_s: float = 0.0
    ready: bool = False  # an inversion exists in the worker
    busy: bool = False  # a reset is in flight
    error: str = ""


@dataclass
class TapeView:
    """The tape panel: the launches of the fit's last iteration."""

    iteration: int = 0
    names: list[str] = field(default_factory=list)
    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)
    # what an unprofiled iteration cost the host (engine.host_costs), once a batch of two steps has run
    host_iteration: int = -1  # the iteration counted; -1: none yet
    host_launches: int = 0
    host_kernels: int = 0  # of the launches, our kernels (the rest: Taichi's fills, copies, element reads)
    host_syncs: int = 0
    host_sync_sites: list[str] = field(default_factory=list)  # where each wait for the device was asked for


@dataclass
class FileDialog:
    """The in-window file dialog (app.ui.panels.file_dialog): what it is for, and where it looks."""

    purpose: str = ""  # a key of file_dialog.PURPOSES while open; "" when closed
    folder: str = ""
    name: str = ""  # the file name (or a path) typed or picked
    entries: list[tuple[str, bool, int]] = field(default_factory=list)  # (name, is folder, bytes) in `listed`
    listed: str = ""  # the folder `entries` describe
    error: str = ""


@dataclass
class AppState:
    """Everything the window shows. See the module docstring."""

    arch: str = "auto"  # as requested
    parity_arch: str = "cpu"
    backend: str = ""  # the arch that actually runs in the primary worker, once it answered
    backend_note: str = ""  # why `auto` did not get CUDA, if it did not
    taichi_version: str = ""
    gl_renderer: str = ""  # the OpenGL renderer drawing the window (llvmpipe under Xvfb)
    gl_samples: int = -1  # samples per pixel of the window (0: no MSAA, which llvmpipe cannot afford)
    fps_cap: float = 0.0  # the frame cap in force (software GL only; 0: none, vsync paces the window)
    primary_status: str = "starting"  # "starting", "ready", "compiling", "unavailable: <why>"
    warmup: list[str] = field(default_factory=list)  # what is compiling/starting now, for the status bar
    warmup_done: int = 0  # start-up steps finished (backend starts, first compiles), of `warmup_total`
    warmup_total: int = 0
    compiling: str = ""  # the primary's first call in flight and its kernel count ("..., 3 of 12 kernels"), or ""
    kernels_prepared: dict[str, int] = field(default_factory=dict)  # kernels each first call prepared (controller)
    errors: list[str] = field(default_factory=list)  # shown in the window until dismissed
    commands: list[Command] = field(default_factory=list)
    show_timings: bool = True  # off for golden screenshots: timing text varies run to run
    ui_scale: float = 1.0  # font size relative to the default (View > UI scale)
    show_shortcuts: bool = False  # the Help > Keyboard shortcuts window
    quit_requested: bool = False
    screenshot_path: str = ""  # a window screenshot to write once `screenshot_frame` is drawn
    screenshot_frame: int = 0
    saved: str = ""  # the last file the File menu wrote, for the status bar
    dialog: FileDialog = field(default_factory=FileDialog)
    ui_fps: float = 0.0
    frame: int = 0
    raymarch: RaymarchView = field(default_factory=RaymarchView)
    fit: FitView = field(default_factory=FitView)
    parity: ParityView = field(default_factory=ParityView)
    tape: TapeView = field(default_factory=TapeView)
    invert: InvertView = field(default_factory=InvertView)

    def error(self, message: str) -> None:
        """Show `message` in the window (once, however often it repeats)."""
        if message not in self.errors:
            self.errors.append(message)


def reset_command(state: AppState) -> Command:
    """The command that restarts the fit with the settings the shape-fit panel shows."""
    fit = state.fit
    return Command("fit_reset", {"target": fit.target, "subdiv": fit.subdiv, "lr": fit.lr, "smooth": fit.smooth,
                                 "smooth_end": fit.smooth_end, "schedule_iters": fit.max_iterations})


def invert_reset_command(state: AppState) -> Command:
    """The command that restarts the inverse render with the perturbation and seed its panel shows."""
    view = state.invert
    return Command("invert_reset", {"t": view.t, "perturbation": view.perturbation, "seed": view.seed})
