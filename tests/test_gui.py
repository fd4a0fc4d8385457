"""The desktop app, driven by imgui's test engine under Xvfb (scripts/test.sh provides the display).

One window session (module fixture) runs a script the way a person would use the app:
wait for live content, Step the fit three times, wait for the live gradient comparison of
iteration 3 and take the golden screenshot, resize the window to 1024x640 and take the second
golden, bring the inverse render's tab to the front, take the third and Step it there, go back to
1280x800 and the default layout, Start and Pause (and wait for the comparison to catch up), run to a
set iteration count and Continue past it, Reset, move the timeline, orbit, pan, zoom and reset the
ray-march view, Play and Pause, use the keyboard shortcuts, save the frame and a screenshot through the File
menu and the file dialog, export the mesh, open a mesh file through the file dialog, open a
file that is not a mesh and dismiss the error, and last compare the render gradient across the
backends and wait for its answer. The script records what the state said after
each action; the tests below check those records, one behaviour each. The primary backend is
cpu and the parity backend vulkan (lavapipe), as on a machine without a GPU.

Golden screenshots: `tests/golden/app_1280x800.png`, `app_1024x640.png` (the shape fit's tab in
front) and `app_1024x640_invert.png` (the inverse render's), the whole window after three Steps and
their gradient comparison, with timing text switched off
(`AppOptions.show_timings=False`). The ray-march image itself is masked out: the renderer's own
tests pin its pixels, and a change of its palette must not fail the app's layout test (the
`--frames` hook test checks that the view shows a scene).
A pixel differs when any
channel differs by more than PIXEL_TOL; the test fails when more than MAX_DIFF_SHARE of the
pixels differ, and writes `out/test-gui/<name>.diff.png` (differing pixels in red over the
dimmed actual image) next to the actual image. UPDATE_GOLDEN=1 rewrites the golden instead.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from app.ui.app import WARM_TIMEOUT_S, AppOptions, is_warm, restore_default_layout, run_app
from app.ui.controller import KERNEL_MANIFEST

log = logging.getLogger(__name__)
GOLDEN = Path(__file__).parent / "golden"
FAILURES = Path(__file__).resolve().parents[1] / "out" / "test-gui"
PIXEL_TOL = 24  # of 255, any channel: absorbs anti-aliasing and last-bit render differences
MAX_DIFF_SHARE = 0.005  # of the window's pixels
WAIT_S = 300.0  # first start compiles kernels on both backends (lavapipe is slow)
RENDER_GRAD_WAIT_S = 600.0  # the parity worker's first render gradient: kernels from the cache (or compiled, cold)

needs_display = pytest.mark.skipif(not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")),
                                   reason="GUI tests need a display: run under xvfb-run (scripts/test.sh does)")

TETRA_OBJ = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"



def _wait(ctx, condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.perf_counter() + timeout_s
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        ctx.yield_()


def _save_through_dialog(ctx, path) -> None:
    """In the open file dialog: type `path` into its name field and press Enter."""
    ctx.yield_(2)
    ctx.set_ref("//$FOCUSED")
    ctx.item_input_value("**/##file_name", str(path))
    ctx.yield_(2)


def _script(records: dict, files: dict):
    """The test-engine script: act, wait for the state to answer, record what it says."""
    from imgui_bundle import hello_imgui, imgui
    from imgui_bundle.immapp import testing

    def capture_golden(ctx, state, size: tuple[int, int], name: str) -> None:
        view = state.raymarch

        def compared_at_this_size() -> bool:  # the parity panel shows the frame of the view as it is now
            width = int(view.view_px[0] * view.res_scale)
            return (state.parity.status == "idle" and view.image_is_full and view.image.shape[1] == width
                    and state.parity.compared_request == view.linear_request)

        for _ in range(5):  # under load a resized layout can start one more render after the first match
            _wait(ctx, compared_at_this_size, f"the parity comparison of a frame at {size[0]}x{size[1]}")
            ctx.mouse_move_to_pos(imgui.ImVec2(size[0] - 1, size[1] - 1))  # park the pointer: no hover highlight
            ctx.yield_(3)
            if compared_at_this_size():
                break
        rect = ctx.item_info("//Ray march/**/##raymarch_view").rect_full
        records[f"mask_{name}"] = [(int(rect.min.x), int(rect.min.y), int(rect.max.x), int(rect.max.y))]
        testing.capture(ctx, str(files[name]))

    def script(ctx, state) -> None:
        fit, view = state.fit, state.raymarch
        seen = records["warmup_seen"] = set()  # every start-up status line shown while the window warmed up

        def warm() -> bool:
            seen.update(state.warmup)
            return is_warm(state)

        _wait(ctx, warm, "live content in every panel", WARM_TIMEOUT_S)  # 300 s fell short at load 12
        records["warm_errors"] = list(state.errors)

        ctx.set_ref("Shape fit")
        for expected in (1, 2, 3):
            ctx.item_click("**/Step")
            _wait(ctx, lambda: fit.iteration == expected, f"iteration {expected} after Step")
        records["after_steps"] = (fit.iteration, list(fit.losses), list(state.tape.names))
        # the goldens show the gradient comparison of iteration 3 (it lands a few seconds later)
        _wait(ctx, lambda: "iteration 3 " in state.parity.grad_summary, "the gradient comparison at iteration 3")
        capture_golden(ctx, state, (1280, 800), "app_1280x800.png")
        docking = hello_imgui.get_runner_params().docking_params
        inverse = state.invert
        records["invert_warm"] = (inverse.ready, inverse.iteration, len(inverse.names), inverse.image is not None,
                                  inverse.errors.get("joints", 0.0))
        records["invert_hidden"] = ctx.item_exists("//Inverse render/**/Step##invert")  # a tab behind the fit
        for size in ((1024, 640), (1280, 800)):  # the default layout at the small size, as a window opened there
            hello_imgui.change_window_size(size)
            ctx.yield_(2)
            restore_default_layout(hello_imgui.get_runner_params())
            ctx.yield_(5)
            if size == (1024, 640):
                records["small_view_px"] = view.view_px
                capture_golden(ctx, state, size, "app_1024x640.png")
                docking.focus_dockable_window("Inverse render")  # its tab to the front
                ctx.yield_(5)
                capture_golden(ctx, state, size, "app_1024x640_invert.png")
                ctx.set_ref("Inverse render")
                ctx.item_click("**/Step##invert")
                _wait(ctx, lambda: inverse.iteration == 1, "one inverse-render iteration after Step")
                records["invert_step"] = (inverse.iteration, list(inverse.losses), inverse.image_version,
                                          inverse.phase, inverse.status, inverse.image_iteration)
        records["front_tab_restored"] = not ctx.item_exists("//Inverse render/**/Step##invert")

        ctx.set_ref("Shape fit")
        ctx.item_click("**/Start")
        _wait(ctx, lambda: fit.iteration >= 8, "the running fit to reach iteration 8")
        records["running"] = fit.running
        ctx.item_click("**/Pause")
        records["paused_flag"] = fit.running
        paused = time.perf_counter()  # the batch in flight (FIT_BATCH_S of work) lands well within a second,
        _wait(ctx, lambda: time.perf_counter() - paused > 1.5, "the batch in flight to land")  # even under load
        paused_at = fit.iteration
        seen = time.perf_counter()
        _wait(ctx, lambda: time.perf_counter() - seen > 1.5, "a paused fit to stay paused")
        records["paused"] = (paused_at, fit.iteration)
        _wait(ctx, lambda: f"iteration {fit.iteration} " in state.parity.grad_summary,
              "the live gradient comparison to reach the paused iteration")
        records["grad_summary"] = state.parity.grad_summary

        stop = fit.iteration + 4
        ctx.item_input_value("**/iterations", stop)
        ctx.item_click("**/Start")
        _wait(ctx, lambda: not fit.running and fit.iteration >= stop, f"the fit to stop at iteration {stop}")
        records["stopped"] = (stop, fit.iteration)
        ctx.item_click("**/Continue")
        _wait(ctx, lambda: not fit.running and fit.iteration > stop, "the fit to continue and stop again")
        records["continued"] = (stop, fit.iteration, fit.max_iterations)

        ctx.item_click("**/Reset")
        _wait(ctx, lambda: fit.ready and not fit.busy and fit.iteration == 0 and not fit.losses, "the reset fit")
        records["reset"] = (fit.iteration, len(fit.losses), fit.target)

        ctx.set_ref("Ray march")
        ctx.item_input_value("**/##timeline", 0.8)
        records["timeline_t"] = view.t
        _wait(ctx, lambda: view.image_is_full and view.linear_request and view.linear_request["t"] == 0.8,
              "a full-quality frame at t=0.8")
        records["frame_t"] = view.linear_request["t"]

        orbit = (view.orbit.yaw, view.orbit.pitch, view.orbit.distance)
        ctx.item_drag_with_delta("**/##raymarch_view", imgui.ImVec2(50, 20))
        ctx.mouse_wheel_y(1)
        ctx.yield_(2)
        records["orbit"] = (orbit, (view.orbit.yaw, view.orbit.pitch, view.orbit.distance))
        center = view.orbit.center
        ctx.mouse_move("**/##raymarch_view")
        ctx.mouse_drag_with_delta(imgui.ImVec2(40, 0), 1)  # right button: pan
        ctx.yield_(2)
        records["panned"] = (center, view.orbit.center)
        ctx.item_click("**/Reset view")
        ctx.yield_(2)
        records["view_reset"] = (view.orbit.yaw, view.orbit.pitch, view.orbit.distance, view.orbit.center)
        ctx.item_click("**/Play")
        start_t = view.t
        ctx.yield_(20)
        ctx.item_click("**/Pause")
        records["played"] = (start_t, view.t, view.playing)

        ctx.mouse_move_to_pos(imgui.ImVec2(640, 790))  # the status bar: no text field has the keyboard
        ctx.key_press(imgui.Key.space)
        ctx.yield_(2)
        playing = view.playing
        ctx.key_press(imgui.Key.space)
        ctx.key_press(imgui.Key.mod_ctrl | imgui.Key.equal)
        ctx.key_press(imgui.Key.f1)
        ctx.yield_(3)
        records["keys"] = (playing, view.playing, state.ui_scale, state.show_shortcuts)
        ctx.key_press(imgui.Key.mod_ctrl | imgui.Key._0)
        ctx.key_press(imgui.Key.f1)
        ctx.yield_(2)
        records["keys_undone"] = (state.ui_scale, state.show_shortcuts)

        from app.ui.controller import MIN_RENDER_PX

        def settled() -> bool:  # the full-quality frame of the view at its size now (the UI scale just changed it),
            # answering the last request: a full frame asked for before the play above may arrive after it stopped,
            # with the play's preview frames still to come
            width, height = (max(int(side * view.res_scale), MIN_RENDER_PX) for side in view.view_px)
            return (view.image_is_full and view.linear_request == view.requested and view.image is not None
                    and view.image.shape[:2] == (height, width))

        _wait(ctx, settled, "the full-quality frame at the view's size after the UI scale changed back")
        ctx.menu_click("//##MainMenuBar/File/Save the ray-march frame...")
        _save_through_dialog(ctx, files["frame"])
        _wait(ctx, lambda: str(files["frame"]) in state.saved, "the saved frame's status line")
        records["frame_saved"] = state.saved  # its size is the frame's at the save (a later frame may differ)
        ctx.key_press(imgui.Key.f12)  # the same dialog, for a screenshot of the whole window
        _save_through_dialog(ctx, files["screenshot"])
        _wait(ctx, lambda: files["screenshot"].exists(), "the window screenshot")

        ctx.set_ref("Shape fit")
        ctx.item_input_value("**/##export_path", str(files["export"]))
        ctx.item_click("**/Export")
        _wait(ctx, lambda: fit.exported == str(files["export"]), "the exported OBJ")

        ctx.set_ref("Shape fit")
        ctx.item_click("**/Browse")  # the in-window file dialog: type the file's path, press Enter
        _save_through_dialog(ctx, files["tetra"])
        _wait(ctx, lambda: fit.ready and not fit.busy and fit.target == str(files["tetra"]), "the opened mesh")
        records["opened"] = (fit.target, None if fit.target_vertices is None else fit.target_vertices.shape)

        ctx.set_ref("Shape fit")
        ctx.item_input_value("**/##mesh_path", str(files["bad"]))  # or typed into the panel's path field
        ctx.item_click("**/Open")
        _wait(ctx, lambda: bool(fit.error) and not fit.busy, "the bad mesh file's error")
        records["bad"] = (fit.error, list(state.errors))
        records["after_bad"] = (fit.ready, fit.target)
        ctx.item_click("**/Step")  # the fit of the last good file is still there, and its controls live
        _wait(ctx, lambda: fit.iteration == 1, "a Step after the bad file")
        records["step_after_bad"] = fit.iteration
        ctx.set_ref("Errors")
        ctx.item_click("**/Dismiss")
        ctx.yield_(2)
        records["dismissed"] = list(state.errors)

        # last: its first evaluation on the parity backend loads the differentiable renderer's kernels there
        ctx.set_ref("Parity")
        ctx.item_click("**/compare render gradient")
        ctx.yield_(2)
        records["render_grad_stage"] = state.parity.render_grad_stage
        asked = time.perf_counter()
        _wait(ctx, lambda: bool(state.parity.render_grad_summary), "the render gradient comparison",
              RENDER_GRAD_WAIT_S)
        records["render_grad"] = (state.parity.render_grad_summary, state.parity.render_grad_stage)
        log.info("the render gradient comparison answered in %.0f s: %s", time.perf_counter() - asked,
                 state.parity.render_grad_summary)

    return script


@pytest.fixture(scope="module")  # its tests are marked slow: the window's first start takes minutes (both backends warm up)
def session(tmp_path_factory):
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        pytest.skip("GUI tests need a display: run under xvfb-run (scripts/test.sh does)")
    folder = tmp_path_factory.mktemp("gui")
    files = {"tetra": folder / "tetra.obj", "bad": folder / "notes.obj", "app_1280x800.png": folder / "app_1280x800.png",
             "app_1024x640.png": folder / "app_1024x640.png",
             "app_1024x640_invert.png": folder / "app_1024x640_invert.png", "export": folder / "fitted.obj",
             "frame": folder / "frame.png", "screenshot": folder / "window.png"}
    files["tetra"].write_text(TETRA_OBJ)
    files["bad"].write_text("this is not a mesh\n")
    records: dict = {}
    run = run_app(AppOptions(arch="cpu", parity_arch="vulkan", show_timings=False,
                             test_function=_script(records, files)))
    return records, files, run


@pytest.mark.slow
@needs_display
def test_window_reaches_live_content_without_errors(session):
    records, _, run = session
    assert records["warm_errors"] == []
    assert run.state.raymarch.frames_rendered >= 1 and run.state.parity.share_within is not None


@pytest.mark.slow
@needs_display
def test_start_up_counts_the_kernels_of_each_first_call_against_the_manifest(session):
    """The status bar says "k of n kernels" while a first call prepares kernels, and n is right: each first call of
    this session prepared the manifest's count (UPDATE_GOLDEN=1 writes the counts of this run into it)."""
    records, _, run = session
    counted = run.state.kernels_prepared
    log.info("kernels prepared by each first call: %s", counted)
    assert {"cpu/primary/invert_reset", "cpu/primary/render_frame", "vulkan/parity/render_frame"} <= set(counted)
    manifest = json.loads(KERNEL_MANIFEST.read_text())
    if os.environ.get("UPDATE_GOLDEN") == "1":
        KERNEL_MANIFEST.write_text(json.dumps(dict(sorted({**manifest, **counted}.items())), indent=1) + "\n")
        return
    assert any(re.search(r"\d+ of \d+ kernels", line) for line in records["warmup_seen"]), records["warmup_seen"]
    assert counted == {key: manifest.get(key) for key in counted}, (
        "a first call prepared another number of kernels than app/ui/kernel_manifest.json says: run the GUI tests "
        "with UPDATE_GOLDEN=1 and commit the manifest")


@pytest.mark.slow
@needs_display
def test_window_is_not_multisampled_and_software_gl_is_capped(session):
    # hello_imgui 1.93 asks for 4x MSAA unless told otherwise; on llvmpipe that cost 2/3 of the frame rate
    from app.ui.app import SOFTWARE_GL, SOFTWARE_GL_FPS_MAX

    state = session[2].state
    assert state.gl_samples == 0
    renderer = state.gl_renderer.lower()
    if "llvmpipe" in renderer:  # Xvfb (scripts/test.sh, CI): Mesa draws on the CPU, so the app must cap itself
        assert state.fps_cap == SOFTWARE_GL_FPS_MAX, f"software GL {state.gl_renderer!r} was not capped"
    else:  # a hardware display: capped only where the app knows the renderer as software
        assert state.fps_cap == (SOFTWARE_GL_FPS_MAX if any(name in renderer for name in SOFTWARE_GL) else 0.0)


@pytest.mark.slow
@needs_display
def test_step_runs_one_iteration_and_fills_the_tape(session):
    iteration, losses, tape = session[0]["after_steps"]
    assert iteration == 3 and len(losses) == 3
    assert losses[2] < losses[0]  # the fit descends
    assert tape and all(isinstance(name, str) and name for name in tape)


@pytest.mark.slow
@needs_display
def test_inverse_render_is_a_tab_behind_the_fit(session):
    # five stacked panels did not fit at 1024x640: the fit and the inverse render share the right column as tabs
    assert session[0]["invert_hidden"] is False and session[0]["front_tab_restored"] is True


@pytest.mark.slow
@needs_display
def test_render_gradient_is_compared_across_backends(session):
    stage, (summary, stage_after) = session[0]["render_grad_stage"], session[0]["render_grad"]
    assert stage.startswith("evaluating on") and stage_after == ""  # said what it did while it worked
    assert "cpu and vulkan agree" in summary and "pixels whose images agree" in summary, summary


@pytest.mark.slow
@needs_display
def test_inverse_render_panel_is_live_and_steps(session):
    ready, iteration, n_params, has_image, joints_off = session[0]["invert_warm"]
    assert ready and iteration == 0 and n_params == 10 and has_image and joints_off >= 15.0
    iteration, losses, _, phase, status, image_iteration = session[0]["invert_step"]
    assert iteration == 1 and len(losses) == 1 and losses[0] > 0.0
    # the recovery `invert` runs: its first step is the search's first generation, and a Step brings its images
    assert phase == "search" and status == "running" and image_iteration == 1


@pytest.mark.slow
@needs_display
def test_start_runs_and_pause_stops(session):
    records = session[0]
    assert records["running"] is True and records["paused_flag"] is False
    paused_at, later = records["paused"]
    assert later == paused_at  # nothing runs after Pause once the batch in flight has landed


@pytest.mark.slow
@needs_display
def test_gradients_are_compared_live_across_backends(session):
    summary = session[0]["grad_summary"]
    assert "agree" in summary and "100.00 % within" in summary, summary


@pytest.mark.slow
@needs_display
def test_reset_starts_over(session):
    iteration, n_losses, target = session[0]["reset"]
    assert (iteration, n_losses, target) == (0, 0, "spot")


@pytest.mark.slow
@needs_display
def test_timeline_moves_the_rendered_frame(session):
    records = session[0]
    assert records["timeline_t"] == pytest.approx(0.8) and records["frame_t"] == pytest.approx(0.8)


@pytest.mark.slow
@needs_display
def test_drag_orbits_and_wheel_zooms(session):
    from app.ui.panels.raymarch_panel import DRAG_DEG_PER_PX, ZOOM_PER_WHEEL

    (yaw, pitch, distance), (yaw2, pitch2, distance2) = session[0]["orbit"]
    assert yaw2 == pytest.approx((yaw - 50 * DRAG_DEG_PER_PX) % 360.0)
    assert pitch2 == pytest.approx(pitch + 20 * DRAG_DEG_PER_PX)
    assert distance2 == pytest.approx(distance * ZOOM_PER_WHEEL)


@pytest.mark.slow
@needs_display
def test_play_advances_the_timeline_and_pause_stops_it(session):
    start_t, end_t, playing = session[0]["played"]
    assert end_t != start_t and playing is False


@pytest.mark.slow
@needs_display
def test_export_writes_the_fitted_mesh(session):
    from engine.mesh_io import load_mesh

    _, files, _ = session
    mesh = load_mesh(files["export"], normalise=False)
    assert len(mesh.faces) == 1280  # the subdivision-3 icosphere, after Reset: iteration 0


@pytest.mark.slow
@needs_display
def test_open_mesh_file_fits_it(session):
    records, files, _ = session
    target, shape = records["opened"]
    assert target == str(files["tetra"]) and shape == (4, 3)


@pytest.mark.slow
@needs_display
def test_bad_mesh_file_is_shown_in_the_window(session):
    records, files, _ = session
    error, errors = records["bad"]
    assert str(files["bad"]) in error and "\n" not in error
    assert error in errors and records["dismissed"] == []


@pytest.mark.slow
@needs_display
def test_bad_mesh_file_keeps_the_last_fit_and_its_controls(session):
    records, files, _ = session
    assert records["after_bad"] == (True, str(files["tetra"]))
    assert records["step_after_bad"] == 1


@pytest.mark.slow
@needs_display
def test_iteration_count_stops_the_fit_and_continue_runs_on(session):
    stop, stopped_at = session[0]["stopped"]
    assert stopped_at == stop
    stop, iteration, count = session[0]["continued"]
    assert iteration == count == 2 * stop  # Continue ran as many iterations again


@pytest.mark.slow
@needs_display
def test_right_drag_pans_and_reset_view_restores_the_camera(session):
    from app.ui.state import RAYMARCH_HOME

    before, after = session[0]["panned"]
    assert after[0] != before[0] and after[1] == pytest.approx(before[1])  # a horizontal drag moves sideways
    home = (RAYMARCH_HOME.yaw, RAYMARCH_HOME.pitch, RAYMARCH_HOME.distance, RAYMARCH_HOME.center)
    assert session[0]["view_reset"] == home


@pytest.mark.slow
@needs_display
def test_keyboard_shortcuts(session):
    playing, stopped, scale, help_shown = session[0]["keys"]
    assert (playing, stopped, help_shown) == (True, False, True)
    assert scale == pytest.approx(1.1)
    assert session[0]["keys_undone"] == (1.0, False)


@pytest.mark.slow
@needs_display
def test_file_menu_saves_the_frame_and_a_screenshot(session):
    from PIL import Image

    records, files, _ = session
    saved = records["frame_saved"]
    size = re.search(r"\((\d+)x(\d+)\)$", saved)  # a full frame: no ", preview"
    assert size and str(files["frame"]) in saved, saved
    width, height = map(int, size.groups())
    assert np.asarray(Image.open(files["frame"])).shape[:2] == (height, width)
    assert np.asarray(Image.open(files["screenshot"])).shape == (800, 1280, 3)


def _diff_image(actual: np.ndarray, differs: np.ndarray) -> np.ndarray:
    out = (actual[..., :3] // 3).astype(np.uint8)
    out[differs] = (255, 0, 0)
    return out


def compare_with_golden(actual_path: Path, name: str, mask: list[tuple[int, int, int, int]] = ()) -> None:
    """Compare a screenshot with tests/golden/<name> (see the module docstring for the rule).

    `mask`: (x0, y0, x1, y1) rectangles left out of the comparison."""
    from PIL import Image

    golden_path = GOLDEN / name
    actual = np.asarray(Image.open(actual_path).convert("RGB"))
    if os.environ.get("UPDATE_GOLDEN") == "1" or not golden_path.exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{golden_path} is missing: run the GUI tests with UPDATE_GOLDEN=1 and commit it")
        GOLDEN.mkdir(exist_ok=True)
        Image.fromarray(actual).save(golden_path)
        pytest.skip(f"wrote {golden_path}: look at it, then commit it")
    golden = np.asarray(Image.open(golden_path).convert("RGB"))
    assert actual.shape == golden.shape, f"{name}: size {actual.shape} vs golden {golden.shape}"
    differs = (np.abs(actual.astype(np.int16) - golden.astype(np.int16)) > PIXEL_TOL).any(axis=-1)
    for x0, y0, x1, y1 in mask:
        differs[y0:y1, x0:x1] = False
    share = float(differs.mean())
    if share > MAX_DIFF_SHARE:
        FAILURES.mkdir(parents=True, exist_ok=True)
        Image.fromarray(actual).save(FAILURES / name)
        Image.fromarray(_diff_image(actual, differs)).save(FAILURES / name.replace(".png", ".diff.png"))
        pytest.fail(f"{name}: {share * 100:.2f} % of pixels differ by more than {PIXEL_TOL}/255 "
                    f"(allowed {MAX_DIFF_SHARE * 100:.2f} %); see {FAILURES}/")


@pytest.mark.slow
@needs_display
@pytest.mark.parametrize("name", ["app_1280x800.png", "app_1024x640.png", "app_1024x640_invert.png"])
def test_window_matches_golden_screenshot(session, name):
    records, files, _ = session
    compare_with_golden(files[name], name, records[f"mask_{name}"])


@pytest.mark.slow
@needs_display
def test_the_layout_holds_at_1024x640(session):
    width, height = session[0]["small_view_px"]
    assert width > 400 and height > 200  # the ray-march view keeps a usable size (its frames render at it)


def _app(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=Path(__file__).resolve().parents[1])


def test_no_display_is_one_line_and_exit_2():
    env = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = _app("--arch", "cpu", env=env)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: no display: use --headless or run under Xvfb"


@needs_display
def test_display_check_holds_its_connection():
    # closing it let xvfb-run's server reset (no -noreset) under the window about to open: half of
    # back-to-back `xvfb-run python -m app` runs failed with "cannot open DISPLAY"
    from app.ui import app as ui_app

    ui_app.require_display()
    ui_app.require_display()
    assert len(ui_app._held_display) == 1 and ui_app._held_display[0]


@pytest.mark.skipif(shutil.which("xvfb-run") is None, reason="needs xvfb-run (Debian package xvfb)")
def test_display_without_opengl_is_one_line_and_exit_2():
    # the app's own exit code, reported by a shell inside xvfb-run: xvfb-run's exit code is its own when it fails to
    # clean up its temporary folder (seen once, exit 5, with another xvfb-run starting beside it)
    app = f"{shlex.quote(sys.executable)} -m app --arch cpu --frames 1; echo \"app exit $?\" >&2"
    result = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 640x480x24 -extension GLX", "sh", "-c", app],
                            capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    lines = result.stderr.splitlines()
    exit_line = next(i for i, line in enumerate(lines) if line.startswith("app exit "))
    assert lines[exit_line] == "app exit 2", result.stderr
    assert lines[exit_line - 1].startswith("error: no OpenGL on DISPLAY=") and "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--arch", "--parity-arch"])
def test_explicit_cuda_without_gpu_is_one_line_and_exit_2(flag):
    from engine import backend

    if backend.cuda_unavailable_reason() is None:
        pytest.skip("a GPU is present: cuda does start here")
    result = _app(flag, "cuda", "--frames", "1")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: backend cuda is not available:") and result.stderr.count("\n") == 1


@needs_display
def test_opengl_too_old_for_the_window_is_one_line_and_exit_2():
    env = {**os.environ, "MESA_GL_VERSION_OVERRIDE": "2.1"}  # Mesa then offers no 3.3 core context
    result = _app("--arch", "cpu", "--frames", "1", env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: cannot open an OpenGL 3.3 window:")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, words", [
    (("--panel", "bogus"), "--panel 'bogus'"),
    (("--size", "12x"), "--size '12x'"),
    (("--frames", "0"), "--frames 0"),
])
def test_bad_gui_flags_are_one_line_errors(args, words):
    result = _app("--arch", "cpu", *args)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {words}") and result.stderr.count("\n") == 1


def _modules_loaded(code: str, modules: tuple[str, ...]) -> list[bool]:
    """Run `code` in a fresh interpreter; which of `modules` it imported."""
    probe = f"{code}\nimport sys; print(*[name in sys.modules for name in {modules!r}])"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    return [word == "True" for word in result.stdout.split()[-len(modules):]]


def test_cli_does_not_import_imgui():
    code = "from app.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _modules_loaded(code, ("imgui_bundle", "taichi")) == [False, False]


def test_ui_process_does_not_import_taichi():
    # a kernel launched in the UI process would freeze the window (Taichi holds the GIL): see app.ui.links
    code = ("import app.ui.app, app.ui.controller, app.ui.gl, app.ui.menus, app.ui.layout\n"
            "from app.ui.panels import file_dialog, invert_panel as invert, parity_panel as parity, "
            "raymarch_panel as raymarch, fit_panel as shape_fit, status_panel as status, tape_panel as tape")
    assert _modules_loaded(code, ("imgui_bundle", "taichi")) == [True, False]


@pytest.mark.slow
@needs_display
def test_frames_screenshot_hook(tmp_path):
    """`python -m app --frames N --screenshot PATH --panel raymarch`: a PNG of the window, exit 0."""
    from PIL import Image

    shot = tmp_path / "shot.png"
    result = _app("--arch", "cpu", "--parity-arch", "cpu", "--frames", "3", "--screenshot", str(shot),
                  "--panel", "raymarch", "--size", "640x400")
    assert result.returncode == 0, result.stderr
    assert "3 frames after warm-up" in result.stdout
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape == (400, 640, 3)
    frame = pixels[120:360, 40:600]  # inside the ray-march view: the scene, not a flat panel
    assert frame.std() > 10.0


WAKE_SCRIPT = """
import threading, time
from imgui_bundle import hello_imgui, immapp
from app.ui.app import _window_up, wake_window
frames, woken = [], []
def gui():
    frames.append(time.perf_counter())
    if frames[-1] - frames[0] > 7.0:
        hello_imgui.get_runner_params().app_shall_exit = True
def waker():  # from 4.5 s on (the window idles after 3 s without input), 20 wakes a second for 1.5 s
    while not frames or time.perf_counter() - frames[0] < 4.5:
        time.sleep(0.01)
    while time.perf_counter() - frames[0] < 6.0:
        wake_window()
        woken.append(time.perf_counter())
        time.sleep(0.05)
params = hello_imgui.RunnerParams()
params.callbacks.show_gui = gui
params.callbacks.post_init = lambda: _window_up(True)
params.fps_idling.fps_idle = 1.0
params.ini_disable = True
threading.Thread(target=waker, daemon=True).start()
immapp.run(params)
t0 = frames[0]
print(sum(3.5 <= f - t0 < 4.5 for f in frames), sum(4.6 <= f - t0 < 5.9 for f in frames), len(woken))
"""


@needs_display
def test_an_idling_window_is_woken_by_wake_window():
    """The links wake the window with every worker answer (app.ui.app.wake_window: GLFW's glfwPostEmptyEvent on
    imgui_bundle's libglfw), so it can idle at a few fps while a recovery runs; this holds only while the window
    runs on that same GLFW library (an imgui-bundle built with GLFW linked in would ignore the wakes: this fails)."""
    result = subprocess.run([sys.executable, "-c", WAKE_SCRIPT], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    idle, woken, wakes = (int(v) for v in result.stdout.split()[-3:])
    assert idle <= 2  # idling at 1 fps between 3.5 and 4.5 s
    assert wakes >= 20 and woken >= 10  # 20 wakes a second: frames at close to that rate, not 1 fps


def test_without_imgui_the_app_is_one_line_and_exit_2():
    # Python 3.10 gets no imgui-bundle wheel (pyproject.toml installs it from 3.11 on): say so, no traceback
    code = ("import sys\nsys.modules['imgui_bundle'] = None\nfrom app.cli import main\n"
            "sys.exit(main(['--arch', 'cpu']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: the desktop app needs imgui-bundle") and result.stderr.count("\n") == 1
