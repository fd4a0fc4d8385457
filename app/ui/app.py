"""The desktop app: one hello_imgui window with five docked panels, a menu bar and a status bar.

`run_app(options)` opens the window and returns the exit code. Panels are
`draw(state, gfx)` functions of the one `AppState`; `Controller.tick` runs before each
frame and connects the state to the backend workers. The default layout holds from
1024x640 up: ray march top left, parity under it, shape fit and inverse render as tabs top right
(the fit in front), tape under them.
View > Restore the default layout puts it back after rearranging (the layout is remembered in the user's
config folder). File, View (UI scale) and Help (keyboard shortcuts) are `app.ui.menus`.

Test hooks (`--frames N --screenshot PATH [--panel NAME] [--size WxH]`): the N frames
are counted once the panels have live content (backend started, a full-quality frame
shown, the fit set up, the first frame and gradient comparisons done or their worker unavailable),
so a screenshot never shows a loading screen; then the window closes and the last
frame is saved as a PNG. `test_function` runs an imgui test-engine test instead.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.errors import Interrupted, UserError
from engine.interrupt import StopFlag, graceful_stop

log = logging.getLogger(__name__)
WINDOW_TITLES = {"raymarch": "Ray march", "fit": "Shape fit", "parity": "Parity", "tape": "Tape",
                 "invert": "Inverse render"}
FRONT_TAB = "fit"  # of the right column's tabs, the one in front in the default layout
SOFTWARE_GL = ("llvmpipe", "softpipe", "swiftshader")  # GL renderers that draw on the CPU
SOFTWARE_GL_FPS_MAX = 60.0  # their frame cap (hardware GL has vsync for that)
IDLE_FPS = 9.0  # an idling window's frame rate (hello_imgui's default): what moves without input or answers
# ...while the inverse render runs: its content changes only with the worker's answers, which wake the window
# (`wake_window`), and every frame drawn on a software GL takes CPU from the recovery on the same cores
# (measured, t = 0.9 seed 4 in the default layout: idling at 9 fps 5.19 steps/s, at 3 fps 5.93, at 1 fps 5.83)
INVERT_IDLE_FPS = 3.0
WARM_TIMEOUT_S = 600.0  # --frames gives up waiting for live content after this long and shoots anyway
WARM_REPORT_S = 60.0  # meanwhile it says what it waits for this often
TEST_WATCHDOG_S = 2400.0  # a test_function script is stopped after this long (a whole GUI session under load)


@dataclass
class AppOptions:
    arch: str = "auto"
    parity_arch: str = "cpu"
    frames: int | None = None  # run this many frames after warm-up, then exit
    screenshot: str | None = None  # save the last frame here (PNG)
    panel: str | None = None  # show only this panel, filling the window
    size: tuple[int, int] = (1280, 800)
    show_timings: bool = True  # golden screenshots turn timing text off
    test_function: Callable | None = None  # an imgui test-engine test: the window closes when it returns
    start_fit: bool = False  # press Start as soon as the fit is set up (for the frame-rate measurement)
    play: bool = False  # with start_fit: press Play on the timeline too (frames render while the fit runs)
    start_invert: bool = False  # press the inverse render's Start once it is set up; close when its recovery ends
    invert_case: tuple[float, int] | None = None  # the inverse render panel's (t, seed) instead of its defaults


_glfw: list = []  # the GLFW library the window runs on (imgui_bundle's), while the window is up (`_window_up`)
_held_display: list = []  # the checked X connection, open until the process exits (see require_display)


def wake_window() -> None:
    """Wake the window's event loop from any thread (GLFW's glfwPostEmptyEvent): an idling window (hello_imgui
    waits for input up to 1 / fps_idle) draws a frame now. The workers' links call it with every answer, so new
    content shows, and the next request goes out, at once however slowly the window idles: while the inverse
    render ran, the window drew 20 frames a second to keep up and llvmpipe took half a core from the recovery
    (measured: 19.1-20.1 s in the panel; woken, idling at 9 fps: 13.7-16.4 s, the same recovery). A no-op while
    no window is up."""
    lib = _glfw[0] if _glfw else None
    if lib is not None:
        lib.glfwPostEmptyEvent()


def _window_up(up: bool) -> None:
    """`wake_window` works from now on (the window exists: `up`) or no longer (it is about to close)."""
    _glfw.clear()
    if up:
        import ctypes

        import imgui_bundle

        try:
            _glfw.append(ctypes.CDLL(os.path.join(os.path.dirname(imgui_bundle.__file__), "libglfw.so.3")))
        except OSError:  # another platform's file name: the window shows answers at its idle rate instead
            pass


def require_display() -> None:
    """Fail in one line when there is no display to open a window on.

    An X display named by $DISPLAY is opened once with Xlib (through ctypes, when libX11 is
    there) so that a stale $DISPLAY fails here, in one line, instead of deep inside GLFW.
    The connection stays open: an X server started without -noreset (xvfb-run's default)
    resets when its last client disconnects, and a window opened during that reset fails
    (measured: half of back-to-back `xvfb-run python -m app` runs, when this closed it).
    A $WAYLAND_DISPLAY counts only when its socket exists; one that names no socket is
    said to be the problem when there is no X display to fall back on.
    """
    wayland = os.environ.get("WAYLAND_DISPLAY")
    if _held_display or (wayland and _wayland_socket(wayland).is_socket()):
        return
    display = os.environ.get("DISPLAY")
    if not display and wayland:
        raise UserError(f"no display: WAYLAND_DISPLAY={wayland} names no Wayland socket ({_wayland_socket(wayland)} "
                        "does not exist): use --headless or run under Xvfb")
    if not display:
        raise UserError("no display: use --headless or run under Xvfb")
    try:
        xlib = ctypes.CDLL("libX11.so.6")
    except OSError:
        return  # no Xlib to ask: let GLFW try
    xlib.XOpenDisplay.restype = ctypes.c_void_p
    xlib.XOpenDisplay.argtypes = [ctypes.c_char_p]
    connection = xlib.XOpenDisplay(display.encode())
    if not connection:
        raise UserError(f"no display: cannot open DISPLAY={display}: use --headless or run under Xvfb")
    opcode, event, error = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    xlib.XQueryExtension.argtypes = [ctypes.c_void_p, ctypes.c_char_p] + [ctypes.POINTER(ctypes.c_int)] * 3
    if not xlib.XQueryExtension(connection, b"GLX", ctypes.byref(opcode), ctypes.byref(event), ctypes.byref(error)):
        raise UserError(f"no OpenGL on DISPLAY={display} (its X server has no GLX extension): "
                        "use --headless, or an X server with GLX (Xvfb has it by default)")
    _held_display.append(connection)  # only a display that passed: a later call asks again otherwise


def _wayland_socket(name: str) -> Path:
    """Where a Wayland client looks for the compositor: $WAYLAND_DISPLAY itself if absolute, else in $XDG_RUNTIME_DIR."""
    return Path(name) if os.path.isabs(name) else Path(os.environ.get("XDG_RUNTIME_DIR", "/run/user/0")) / name


def parse_size(text: str) -> tuple[int, int]:
    """'1280x800' -> (1280, 800); UserError naming --size otherwise."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise UserError(f"--size '{text}': expected WIDTHxHEIGHT, e.g. 1280x800") from None
    if not (320 <= width <= 8192 and 240 <= height <= 8192):
        raise UserError(f"--size '{text}': width 320..8192 and height 240..8192")
    return width, height


def warm_blockers(state) -> list[str]:
    """What the panels still wait for before they show live content ([] once warm)."""
    if state.primary_status.startswith("unavailable"):
        return []
    blockers = []
    if not (state.raymarch.image_is_full or state.raymarch.error):
        blockers.append("a full-quality ray-march frame")
    if not (state.fit.ready or state.fit.error):
        blockers.append("the shape fit's set-up")
    if not (state.parity.share_within is not None or state.parity.status.startswith("unavailable")
            or state.parity.error or state.raymarch.error):
        blockers.append(f"the first parity comparison (parity worker: {state.parity.status})")
    if not (state.parity.grad_summary or state.parity.status.startswith("unavailable") or state.fit.error):
        blockers.append("the first gradient comparison")  # set when it lands, or fails
    if not (state.invert.ready or state.invert.error):
        blockers.append("the inverse render's set-up")
    return blockers


def is_warm(state) -> bool:
    """True once every panel shows live content (see the module docstring)."""
    return not warm_blockers(state)


def _docking(panel: str | None):
    """(docking splits, {panel: dock space}) of the default layout, or of `panel` alone filling the window.

    The right column holds the shape fit and the inverse render as tabs of one dock space (FRONT_TAB
    in front) above the tape: stacked, five panels did not fit at 1024x640 (the fit's plot ran over
    its view, the inverse render's table and buttons were cut off)."""
    from imgui_bundle import hello_imgui, imgui

    def split(initial: str, new: str, direction, ratio: float) -> hello_imgui.DockingSplit:
        return hello_imgui.DockingSplit(initial_dock_=initial, new_dock_=new, direction_=direction, ratio_=ratio)

    if panel is not None:
        return [], {panel: "MainDockSpace"}
    splits = [
        split("MainDockSpace", "RightSpace", imgui.Dir.right, 0.45),
        split("MainDockSpace", "ParitySpace", imgui.Dir.down, 0.4),
        split("RightSpace", "TapeSpace", imgui.Dir.down, 0.3),
    ]
    return splits, {"raymarch": "MainDockSpace", "parity": "ParitySpace", "fit": "RightSpace", "invert": "RightSpace",
                    "tape": "TapeSpace"}


def restore_default_layout(params) -> None:
    """Put every panel back where `_docking` puts it, shown, with FRONT_TAB in front (View > Restore...)."""
    docking = params.docking_params
    docking.layout_reset = True
    for panel in docking.dockable_windows:
        panel.is_visible = True
    docking.focus_dockable_window(WINDOW_TITLES[FRONT_TAB])


def launch_app(args) -> int:
    """The CLI's GUI branch: check the flags and the display, then open the window."""
    from app.ui.state import PANELS
    from engine import backend, output_dir

    if args.panel is not None and args.panel not in PANELS:
        raise UserError(f"--panel '{args.panel}': choose one of {', '.join(PANELS)}")
    if args.frames is not None and args.frames < 1:
        raise UserError(f"--frames {args.frames}: must be at least 1")
    size = parse_size(args.size)
    arch, parity_arch = backend.resolve_archs(args.arch, args.parity_arch)
    if args.screenshot is not None:
        output_dir.check_output_file(args.screenshot, "--screenshot")  # before a window opens, not after the run
    require_imgui()
    require_display()
    run = run_app(AppOptions(arch=arch, parity_arch=parity_arch, frames=args.frames,
                             screenshot=args.screenshot, panel=args.panel, size=size))
    if args.frames is not None and run.state.primary_status.startswith("unavailable"):
        what = "stopped" if run.state.backend else "never started"
        raise UserError(f"the {arch} backend {what}: {run.state.primary_status.split(': ', 1)[-1]}")
    if args.frames is not None:
        print(run.summary() + (f"; screenshot {args.screenshot}" if args.screenshot else ""))
    return run.exit_code


@dataclass
class AppRun:
    """What a closed window leaves behind: its exit code, final state and frame timing after warm-up."""

    exit_code: int
    state: object  # app.ui.state.AppState
    warm_frames: int = 0  # frames drawn after the panels had live content
    warm_seconds: float = 0.0
    warm_fit_iterations: int = 0  # fit iterations done meanwhile
    warm_renders: int = 0  # ray-march frames that landed meanwhile
    invert_seconds: float = 0.0  # start_invert: from pressing Start to the recovery's end
    invert_frames: int = 0  # frames drawn meanwhile
    first_picture_s: float | None = None  # from the process's start to the first ray-march picture
    warm_after_s: float | None = None  # ...to live content in every panel

    @property
    def fps(self) -> float:
        return self.warm_frames / self.warm_seconds if self.warm_seconds > 0 else 0.0

    def summary(self) -> str:
        view, fit = self.state.raymarch, self.state.fit
        frame = f"{view.image.shape[1]}x{view.image.shape[0]}" if view.image is not None else "no frame"
        started = (f"first picture after {self.first_picture_s:.1f} s, every panel live after "
                   f"{self.warm_after_s:.1f} s; " if self.first_picture_s is not None and self.warm_after_s else "")
        return (f"{started}{self.warm_frames} frames after warm-up in {self.warm_seconds:.1f} s: {self.fps:.1f} fps; "
                f"ray march {frame} {view.timing()}; fit iteration {fit.iteration}")


def _process_age_s() -> float:
    """Seconds since this process started (Linux /proc; 0 where that cannot be read)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            started_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return max(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 0.0)


class _FrameClock:
    """Frame times for the timeline, and the warm-up gate of the --frames hook."""

    def __init__(self):
        self.last = self.started = time.perf_counter()
        self.process_started = self.started - _process_age_s()  # what a person waits counts from the command
        self.first_picture_s: float | None = None  # since the process started
        self.warm_frame: int | None = None
        self.warm_at = 0.0
        self.warm_iteration = self.warm_renders = 0
        self.invert_at: float | None = None  # start_invert: when Start was pressed, and at which frame
        self.invert_frame = 0
        self.next_report_s = WARM_REPORT_S

    def tick(self) -> float:
        now = time.perf_counter()
        dt, self.last = now - self.last, now
        return dt

    def mark_warm(self, state) -> None:
        if self.first_picture_s is None and state.raymarch.frames_rendered:
            self.first_picture_s = self.last - self.process_started
            log.debug("the first ray-march picture after %.1f s", self.first_picture_s)
        if self.warm_frame is not None:
            return
        waited = self.last - self.started
        if is_warm(state) or waited > WARM_TIMEOUT_S:
            self.warm_frame, self.warm_at, self.warm_iteration = state.frame, self.last, state.fit.iteration
            self.warm_renders = state.raymarch.frames_rendered
            log.debug("warm after %.1f s (frame %d): every panel shows live content", waited, state.frame)
        elif waited > self.next_report_s:  # say what a long start-up waits for (first runs compile for minutes)
            self.next_report_s += WARM_REPORT_S
            log.info("still waiting after %.0f s for: %s", waited, "; ".join(warm_blockers(state)))


def require_imgui() -> None:
    """Fail in one line when imgui-bundle is missing (Python 3.10 gets no wheel of it: see pyproject.toml)."""
    try:
        import imgui_bundle  # noqa: F401
    except ImportError:
        raise UserError(f"the desktop app needs imgui-bundle, which is not installed for Python "
                        f"{sys.version_info[0]}.{sys.version_info[1]} (it has wheels for 3.11 to 3.13; "
                        "`pip install imgui-bundle` builds it from source); --headless, render and fit "
                        "work without it") from None


def run_app(options: AppOptions) -> AppRun:
    """Open the window; return once it closes."""
    require_display()
    require_imgui()
    from imgui_bundle import hello_imgui, immapp, imgui

    from app.ui import menus
    from app.ui.controller import Controller
    from app.ui.gl import Gfx
    from app.ui.layout import readable_sliders
    from app.ui.panels import (
        file_dialog,
        invert_panel as invert,
        parity_panel as parity,
        raymarch_panel as raymarch,
        fit_panel as shape_fit,
        status_panel as status,
        tape_panel as tape,
    )
    from app.ui.state import AppState

    state = AppState(arch=options.arch, parity_arch=options.parity_arch, show_timings=options.show_timings,
                     taichi_version=importlib.metadata.version("taichi"))
    if options.invert_case is not None:
        state.invert.t, state.invert.seed = options.invert_case
    controller = Controller(state, on_answer=wake_window)
    draws = {"raymarch": raymarch.draw, "fit": shape_fit.draw, "parity": parity.draw, "tape": tape.draw,
             "invert": invert.draw}
    gfx: list[Gfx] = []  # created once the GL context exists
    clock = _FrameClock()
    scripted = options.frames is not None or options.test_function is not None

    def before_frame() -> None:
        # every reason to close only ever sets app_shall_exit: a signal's (SIGINT/SIGTERM: close the window
        # like its close button, then say so, exit code 130) once lost to the --frames count resetting it
        if stop:
            params.app_shall_exit = True
            return
        controller.tick(state, clock.tick())
        state.frame += 1
        state.ui_fps = imgui.get_io().framerate
        imgui.get_style().font_scale_main = state.ui_scale
        if state.quit_requested:
            params.app_shall_exit = True
        clock.mark_warm(state)
        if options.start_fit and state.fit.ready and clock.warm_frame is not None and not state.fit.iteration:
            state.fit.running = True
            state.raymarch.playing = options.play
        if options.start_invert:
            invert = state.invert
            if invert.ready and clock.warm_frame is not None and clock.invert_at is None:
                invert.running, clock.invert_at, clock.invert_frame = True, clock.last, state.frame
            elif invert.done:
                params.app_shall_exit = True
        busy = (state.raymarch.playing or state.fit.running or bool(state.warmup)
                or state.parity.status == "busy" or bool(state.parity.render_grad_stage))
        # idle (hello_imgui's few fps, after 3 s without input) when nothing moves; a worker's answer wakes it
        params.fps_idling.enable_idling = not scripted and not busy
        params.fps_idling.fps_idle = INVERT_IDLE_FPS if state.invert.running else IDLE_FPS
        if options.frames is not None and clock.warm_frame is not None and \
                state.frame - clock.warm_frame >= options.frames:
            params.app_shall_exit = True

    def window(name: str, dock: str) -> hello_imgui.DockableWindow:
        def gui() -> None:
            if gfx:
                draws[name](state, gfx[0])
        panel = hello_imgui.DockableWindow(label_=WINDOW_TITLES[name], dock_space_name_=dock, gui_function_=gui)
        panel.focus_window_at_next_frame = name == FRONT_TAB
        return panel

    params = hello_imgui.RunnerParams()
    params.app_window_params.window_title = "shannon-autograd"
    params.app_window_params.window_geometry.size = options.size
    params.imgui_window_params.default_imgui_window_type = (
        hello_imgui.DefaultImGuiWindowType.provide_full_screen_dock_space)
    # hello_imgui asks for a multisampled window by default (4 samples on llvmpipe); ImGui draws its own
    # fringes and our 3D view its own target, so the window needs none: bare window 67 -> 191 fps on llvmpipe
    params.renderer_backend_options.open_gl_options.anti_aliasing_samples = 0
    params.imgui_window_params.show_status_bar = True
    params.imgui_window_params.show_status_fps = False
    params.imgui_window_params.show_menu_bar = True
    params.imgui_window_params.show_menu_app = False
    params.imgui_window_params.show_menu_view = False  # drawn by app.ui.menus, between File and Help
    params.imgui_window_params.remember_status_bar_settings = False
    splits, docks = _docking(options.panel)
    params.docking_params.docking_splits = splits
    params.docking_params.dockable_windows = [window(name, dock) for name, dock in docks.items()]
    params.docking_params.layout_condition = hello_imgui.DockingLayoutCondition.application_start
    if scripted:
        params.ini_disable = True  # tests and screenshots start from the default layout, every time
    else:
        params.ini_folder_type = hello_imgui.IniFolderType.app_user_config_folder
        params.ini_filename = "shannon-autograd/imgui.ini"

    def post_init() -> None:
        readable_sliders()
        _window_up(True)
        gfx.append(Gfx())
        state.gl_renderer = gfx[0].ctx.info["GL_RENDERER"]
        state.gl_samples = gfx[0].window_samples
        if any(name in state.gl_renderer.lower() for name in SOFTWARE_GL):
            # no vsync there (Xvfb) and the frames come from the CPU: beyond 60 per second they only
            # take it from the fit (measured: 63-82 it/s uncapped, 93-124 capped, at 54-67 fps)
            params.fps_idling.fps_max = state.fps_cap = SOFTWARE_GL_FPS_MAX

    def top_level() -> None:  # every frame, outside the panels
        status.draw_errors(state)
        file_dialog.draw(state)
        menus.draw_shortcuts_window(state)
        menus.handle_shortcuts(state)

    def before_swap() -> None:  # the frame is complete in the back buffer: File > Save screenshot reads it
        if state.screenshot_path and state.frame >= state.screenshot_frame and gfx:
            path, state.screenshot_path = state.screenshot_path, ""
            _write_window_png(gfx[0], path, state)

    params.callbacks.post_init = post_init
    params.callbacks.pre_new_frame = before_frame
    params.callbacks.show_status = lambda: status.draw_status(state)
    params.callbacks.show_gui = top_level
    params.callbacks.show_menus = lambda: menus.draw_menus(state, params.docking_params.dockable_windows,
                                                           lambda: restore_default_layout(params))
    params.callbacks.before_swap = before_swap
    def before_exit() -> None:  # the window is still up: ask, do not wait (`controller.close` below waits)
        _window_up(False)
        controller.request_stop()

    params.callbacks.before_exit = before_exit
    controller.start(state)
    addons = immapp.AddOnsParams(with_implot=True)
    stop = StopFlag()
    try:
        if options.test_function is not None:
            from imgui_bundle.immapp import testing

            def patient_watchdog() -> None:  # the first run compiles kernels for minutes: no test kill at 60 s
                engine_io = imgui.test_engine.get_io(hello_imgui.get_imgui_test_engine())
                engine_io.config_watchdog_warning = WARM_TIMEOUT_S
                engine_io.config_watchdog_kill_test = TEST_WATCHDOG_S

            params.callbacks.register_tests = patient_watchdog
            testing.run(test_function=lambda ctx: options.test_function(ctx, state),
                        runner_params=params, add_ons_params=addons)
        else:
            with graceful_stop(stop):
                immapp.run(params, addons)
    except RuntimeError as exc:
        if gfx:  # the window was up: a failure while running, keep its traceback
            raise
        reason = str(exc).split('"')[1] if str(exc).count('"') >= 2 else str(exc)
        raise UserError(f"cannot open an OpenGL 3.3 window: {reason} (needs Mesa's or a GPU's OpenGL; "
                        "or use --headless)") from None
    finally:
        _window_up(False)
        controller.close()
    if stop:
        raise Interrupted(stop.signal_name, "the window was closed")
    run = AppRun(0, state, first_picture_s=clock.first_picture_s)
    if clock.warm_frame is not None:
        run.warm_after_s = clock.warm_at - clock.process_started
        run.warm_frames, run.warm_seconds = state.frame - clock.warm_frame, clock.last - clock.warm_at
        run.warm_fit_iterations = state.fit.iteration - clock.warm_iteration
        run.warm_renders = state.raymarch.frames_rendered - clock.warm_renders
    if clock.invert_at is not None:
        run.invert_seconds, run.invert_frames = clock.last - clock.invert_at, state.frame - clock.invert_frame
    if options.screenshot:
        _save_screenshot(options.screenshot)
    return run


def _write_window_png(gfx, path: str, state) -> None:
    """The window's framebuffer as it is now, as a PNG (File > Save screenshot)."""
    import numpy as np

    from engine.image_io import write_png

    width, height = gfx.ctx.screen.viewport[2:]
    pixels = np.frombuffer(gfx.ctx.screen.read(components=3), np.uint8).reshape(height, width, 3)[::-1]
    try:
        write_png(path, pixels)
    except (OSError, UserError) as exc:
        state.error(f"save screenshot: cannot write {path}: {exc}")
        return
    state.saved = f"wrote {path} ({width}x{height})"


def _save_screenshot(path: str) -> None:
    from imgui_bundle import hello_imgui

    from engine.image_io import write_png

    pixels = hello_imgui.final_app_window_screenshot()
    if pixels is None or pixels.size == 0:
        raise UserError(f"--screenshot {path}: the window closed before a frame was drawn")
    write_png(path, pixels[..., :3])
