"""The desktop app's one state object: everything the panels show and edit.

Panels are functions of an `AppState`: they draw it and write the user's edits and
intents back into it (a camera angle, `fit.running`, a queued `Command`). They never
talk to a backend. `app.ui.controller` turns the state into requests for the backend
workers and writes their answers back, on the UI thread, once per frame. The state is
grouped by panel (`raymarch`, `fit`, `parity`, `tape`, `invert`) plus the app-wide fields; the
groups are plain parts of the one object, not separate owners.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.scenes.fit_settings import RECOMMENDED_ITERS, RECOMMENDED_LR, RECOMMENDED_SMOOTH, RECOMMENDED_SMOOTH_END
from app.scenes.fit_settings import TARGETS as FIT_TARGETS  # built-in targets; any mesh file may be opened too
PANELS = ("raymarch", "fit", "parity", "tape", "invert")  # the dockable panels, by --panel name


@dataclass
class Command:
    """An intent a panel queues for the controller: `kind` names it, `args` carries its inputs."""

    kind: str  # "fit_reset", "fit_step", "fit_export", "parity_grad", "invert_reset", "invert_step", "render_grad"
    args: dict = field(default_factory=dict)


@dataclass
class Orbit:
    """An orbit camera around a target point: angles in degrees, distance in scene units."""

    yaw: float
    pitch: float
    distance: float


@dataclass
class RaymarchView:
    """The ray-march panel: timeline, camera, resolution and the frame on screen."""

    t: float = 0.45  # timeline position in [0, 1] (app.scenes.robot_arm): the arm carries the tile here
    cycle_s: float = 8.0  # seconds for the whole timeline at speed 1
    playing: bool = False
    speed: float = 1.0
    orbit: Orbit = field(default_factory=lambda: Orbit(yaw=18.0, pitch=16.0, distance=5.4))  # engine.render.Camera's
    res_scale: float = 0.5  # full-quality frames render at this fraction of the panel's pixels
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
    error: str = ""  # why the last frame failed, shown in the panel; "" after a good frame

    def timing(self) -> str:
        """The last frame's render time as shown to the user (the worker compiles before its first frame)."""
        return f"{self.ms_per_frame:.0f} ms/frame"


@dataclass
class FitView:
    """The shape-fit panel: settings, run control, progress and the meshes."""

    target: str = "spot"  # one of FIT_TARGETS or a mesh file path
    path_input: str = ""  # the path typed (or picked) for "Open"
    subdiv: int = 3
    lr: float = RECOMMENDED_LR  # the settings measured best on the real targets (app.scenes.fit_settings)
    smooth: float = RECOMMENDED_SMOOTH
    smooth_end: float = RECOMMENDED_SMOOTH_END
    running: bool = False  # Start/Pause: the controller steps the fit while True
    max_iterations: int = RECOMMENDED_ITERS  # Start stops here (and the smoothing schedule ends here)
    iteration: int = 0
    losses: list[float] = field(default_factory=list)
    iterations_per_s: float = 0.0
    vertices: np.ndarray | None = None  # (V, 3) float32, current mesh
    faces: np.ndarray | None = None  # (F, 3) int32
    target_vertices: np.ndarray | None = None
    target_faces: np.ndarray | None = None
    mesh_version: int = 0
    target_version: int = 0
    orbit: Orbit = field(default_factory=lambda: Orbit(yaw=30.0, pitch=20.0, distance=3.2))
    export_path: str = "out/fit.obj"
    exported: str = ""  # the last file written, shown under the button
    ready: bool = False  # a fit exists in the worker (after the first reset answers)
    busy: bool = False  # a reset (target load + set-up) is in flight
    error: str = ""  # why the last reset/step failed, shown in the panel


@dataclass
class ParityView:
    """The parity panel: the last comparison of the primary and parity backends."""

    atol: float = 1e-4
    status: str = "starting"  # "starting", "idle", "busy", or "unavailable: <why>"
    what: str = ""  # what the numbers below compare, e.g. "ray-march frame t=2.50 s, 320x200"
    share_within: float | None = None
    max_abs_err: float | None = None
    worst: str = ""
    heatmap: np.ndarray | None = None  # (H, W, 3) uint8: log10 |A - B| through a colour map
    heatmap_version: int = 0
    hist_log_err: np.ndarray | None = None  # bin centres, log10 |A - B|
    hist_counts: np.ndarray | None = None
    compared_request: dict | None = None  # the render request behind the numbers
    grad_summary: str = ""  # parity of the current fit's gradients, when compared
    render_grad_summary: str = ""  # parity of the inverse render's gradient, when compared
    error: str = ""  # why the last frame comparison failed; "" after a good one


@dataclass
class InvertView:
    """The inverse-render panel: recover the scene's pose from a rendered target (app.scenes.invert)."""

    t: float = 0.1  # the timeline frame that is the target
    perturbation: float = 1.0  # times the default start perturbation (joints 20 deg, gripper 0.03 m, letter 0.2 ...)
    seed: int = 1
    running: bool = False  # Start/Pause: the controller keeps sending batches while True
    max_iterations: int = 300
    iteration: int = 0
    losses: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the pose parameters shown in the table
    units: list[str] = field(default_factory=list)
    true: list[float] = field(default_factory=list)  # in display units (degrees, metres)
    start: list[float] = field(default_factory=list)
    current: list[float] = field(default_factory=list)
    errors: dict = field(default_factory=dict)  # largest error per group, display units
    target: np.ndarray | None = None  # (H, W, 3) uint8 sRGB
    image: np.ndarray | None = None  # the current render
    diff: np.ndarray | None = None  # |current - target|, amplified
    image_version: int = 0
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
    errors: list[str] = field(default_factory=list)  # shown in the window until dismissed
    commands: list[Command] = field(default_factory=list)
    show_timings: bool = True  # off for golden screenshots: timing text varies run to run
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
