"""The desktop app's pieces that need no window: camera framing and panning, the file dialog's
listing, the heat map's colour bar, the start-up progress count, the menu's shortcut table, the
render-gradient comparison's protocol, and the inverse render's snapshots (status, verdict, steps) and plot helpers."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from app.ui.controller import START_UP, Controller
from app.ui.gl import MESH_FOV_Y
from app.ui.menus import SHORTCUTS
from app.ui.panels import file_dialog
from app.ui.panels.fit_panel import FRAME_MARGIN, framing_distance
from app.ui.state import AppState, Command, Orbit
from engine import image_io


@pytest.mark.parametrize("aspect", [0.5, 1.0, 2.5])
def test_framing_fits_the_sphere_in_the_narrower_angle(aspect):
    radius = 1.7
    distance = framing_distance(radius, aspect)
    half_y = MESH_FOV_Y / 2
    half_x = math.atan(math.tan(half_y) * aspect)
    seen = math.asin(radius / distance)  # the sphere's angular radius from the camera
    assert seen == pytest.approx(math.asin(1 / FRAME_MARGIN * math.sin(min(half_x, half_y))))
    assert seen < min(half_x, half_y)  # the whole sphere is in view, with the margin


def test_pan_follows_the_mouse_in_the_view_plane():
    orbit = Orbit(yaw=0.0, pitch=0.0, distance=5.0)  # looking down -z from +z: right is +x, up is +y
    orbit.pan(10.0, 0.0, fov_y_deg=36.0, view_height_px=400.0)
    metres_per_px = 2 * 5.0 * math.tan(math.radians(18.0)) / 400.0
    np.testing.assert_allclose(orbit.center, (-10 * metres_per_px, 0.0, 0.0), atol=1e-12)  # the scene moves right
    orbit.pan(0.0, 10.0, fov_y_deg=36.0, view_height_px=400.0)
    np.testing.assert_allclose(orbit.center, (-10 * metres_per_px, 10 * metres_per_px, 0.0), atol=1e-12)


def test_file_dialog_lists_folders_first_without_sizes(tmp_path):
    (tmp_path / "b_folder").mkdir()
    (tmp_path / "a.obj").write_bytes(b"x" * 2048)
    (tmp_path / "notes.txt").write_text("not listed")
    (tmp_path / ".hidden.obj").write_text("not listed")
    entries = file_dialog.list_folder(str(tmp_path), file_dialog.MESH_EXTENSIONS)
    assert entries == [("b_folder", True, 0), ("a.obj", False, 2048)]
    assert file_dialog.size_text(2048) == "2.0 KiB" and file_dialog.size_text(512) == "512 B"


def test_file_dialog_accepts_a_typed_path_and_queues_its_command(tmp_path):
    state = AppState()
    file_dialog.open_dialog(state, "save_frame", str(tmp_path / "shot"))
    assert (state.dialog.folder, state.dialog.name) == (str(tmp_path), "shot")
    assert file_dialog.chosen_path(state) == str(tmp_path / "shot.png")  # a bare name gets the purpose's extension
    file_dialog.open_dialog(state, "open_mesh", str(tmp_path / "missing.obj"))
    state.dialog.name = "missing.obj"
    assert file_dialog.chosen_path(state) == "" and "no such file" in state.dialog.error
    (tmp_path / "sub").mkdir()
    state.dialog.name = "sub"  # a folder typed as the name is entered, not chosen
    assert file_dialog.chosen_path(state) == "" and state.dialog.folder == str(tmp_path / "sub")


def test_parity_heat_map_is_scaled_to_the_data_with_the_tolerance_and_the_worst_pixels():
    from app.ui.parity_summary import summarise

    atol = 1e-4
    a = np.zeros((4, 5, 3))
    b = a.copy()  # backends that agree far better than atol (the flat heat map of a fixed scale around atol)
    b[0, 1, 0], b[2, 3, 1], b[3, 4, 2] = 3e-8, 2e-7, 4e-7
    out = summarise(a, b, atol)
    lo, hi = out["log_range"]
    assert (lo, hi) == (-8.0, -3.0)  # from the smallest error's decade to a decade past atol
    stops = np.round(image_io.heatmap_colours() * 255).astype(np.uint8)
    heat = out["heatmap"]
    np.testing.assert_array_equal(heat[1, 1], stops[0])  # exact agreement: the bottom colour
    assert len({tuple(heat[y, x]) for y, x in ((1, 1), (0, 1), (2, 3), (3, 4))}) == 4  # each error its own colour
    assert [(row, column) for row, column, _ in out["worst_pixels"]] == [(3, 4), (2, 3), (0, 1)]  # worst first
    assert out["worst_pixels"][0][2] == pytest.approx(4e-7)
    outside = b.copy()
    outside[1, 2, 0] = 0.2  # one pixel far outside: the range reaches it
    assert summarise(a, outside, atol)["log_range"] == (-8.0, 0.0)
    assert summarise(a, a, atol)["log_range"] == (-5.0, -3.0) and summarise(a, a, atol)["worst_pixels"] == []
    legend = image_io.diff_legend((lo, hi), atol)
    assert legend.ticks[0] == (pytest.approx(0.8), "atol 0.0001")  # the tolerance on the bar, 4 of 5 decades up
    assert [label for _, label in legend.ticks[1:]] == ["1e-8", "1e-7", "1e-6", "1e-5", "1e-4", "1e-3"]


class _Link:
    def __init__(self, status: str, in_flight: str = "", kernels_in_call: int = 0):
        self.status, self.in_flight, self.backend, self.arch = status, in_flight, {"arch": "cpu"}, "cpu"
        self.kernels_in_call = kernels_in_call


def test_start_up_progress_counts_finished_steps_and_the_kernels_of_the_first_call():
    state = AppState(arch="cpu", parity_arch="vulkan", show_timings=False)
    controller = Controller.__new__(Controller)  # no worker links: the counting alone
    controller.primary = _Link("busy", "app.ui.services:render_frame", kernels_in_call=3)
    controller.parity = _Link("starting")
    controller._first_calls = {controller.primary: {"render_frame", "fit_reset"},
                               controller.parity: {"render_frame", "fit_gradient_at"}}
    controller._roles = {controller.primary: "primary", controller.parity: "parity"}
    controller._kernels_expected = {"cpu/primary/render_frame": 5}
    controller._started_at = {}
    Controller._link_status(controller, state)
    total = sum(1 + len(steps) for steps in START_UP.values())
    assert (state.warmup_done, state.warmup_total) == (1, total)  # the primary backend has started
    assert state.warmup == ["compiling the ray-march kernel on cpu, 3 of 5 kernels", "starting the vulkan (parity) backend"]
    assert state.compiling == "compiling the ray-march kernel, 3 of 5 kernels"  # what the panels say while they wait
    controller.primary.kernels_in_call = 6  # more than the manifest counted (a changed renderer): no "of n"
    Controller._link_status(controller, state)
    assert state.warmup[0] == "compiling the ray-march kernel on cpu, 6 kernels"
    controller._first_calls[controller.primary].discard("render_frame")
    controller.parity = _Link("unavailable: no Vulkan")
    controller._first_calls[controller.parity] = {"render_frame", "fit_gradient_at"}
    controller._roles[controller.parity] = "parity"
    Controller._link_status(controller, state)
    assert state.warmup_done == 2 + 1 + len(START_UP["parity"])  # an unavailable worker has nothing left to do
    assert state.compiling == ""


def test_every_shortcut_has_its_own_key():
    keys = [shortcut.key for shortcut in SHORTCUTS.values()]
    assert len(set(keys)) == len(keys)
    labels = [shortcut.keys for shortcut in SHORTCUTS.values()]
    assert len(set(labels)) == len(labels)


class _Recorder(_Link):
    """A worker link that keeps what is sent to it."""

    def __init__(self):
        super().__init__("ready")
        self.sent, self.started = [], False

    def start(self) -> None:
        self.started = True

    def send(self, request) -> None:
        self.sent.append(request)


def _render_grad_controller() -> tuple[Controller, AppState]:
    state = AppState(arch="cpu", parity_arch="vulkan", show_timings=False)
    controller = Controller.__new__(Controller)  # recording links: the render-gradient comparison's protocol alone
    controller.primary, controller.parity, controller.render_grad = _Recorder(), _Recorder(), _Recorder()
    controller._first_calls = {controller.primary: set(), controller.parity: set(),
                               controller.render_grad: {"render_gradient"}}
    controller._roles = {controller.primary: "primary", controller.parity: "parity",
                         controller.render_grad: "render_grad"}
    return controller, state


def _answer(request, **outputs):
    from app.ui.controller import _parity_post
    from app.ui.links import Answer

    answer = Answer(request, outputs)
    if request.slot == "render_grad":
        _parity_post(answer)
    return answer


@pytest.mark.parametrize("b_off", [0.0, 1e-2])
def test_render_gradient_comparison_redoes_both_sides_over_the_agreeing_pixels(b_off):
    # as the claim render_grad_parity: a pixel whose images differ (a flipped march decision) leaves the comparison
    controller, state = _render_grad_controller()
    state.commands.append(Command("render_grad"))
    controller._command(state, state.commands.pop())
    assert state.parity.render_grad_stage == "evaluating on cpu (A)"
    first_a = controller.primary.sent[-1]
    image_a = np.zeros((2, 3, 3), np.float32)
    at = {"theta": np.arange(4.0), "weight": np.ones((2, 3), np.float32)}
    grad_a = np.array([1.0, -2.0, 0.5, 0.0])
    controller._primary_answer(state, _answer(first_a, grad=grad_a, image=image_a, iteration=np.int64(7), at=at))
    assert state.parity.render_grad_stage.startswith("starting a vulkan worker for B")
    assert controller.render_grad.started and not controller.parity.sent  # a worker of its own, started on demand
    first_b = controller.render_grad.sent[-1]
    image_b = image_a.copy()
    image_b[1, 2, 0] = 1e-3  # beyond PIXEL_ATOL: this pixel's gradient is not compared
    controller._parity_answer(state, _answer(first_b, grad=grad_a + 0.5, image=image_b))
    second_a = controller.primary.sent[-1]
    assert second_a.name.endswith("invert_gradient") and second_a.inputs["weight"].sum() == 5
    assert second_a.inputs["weight"][1, 2] == 0 and np.array_equal(second_a.inputs["theta"], at["theta"])
    masked = {**at, "weight": second_a.inputs["weight"]}
    controller._primary_answer(state, _answer(second_a, grad=grad_a, image=image_a, iteration=np.int64(8), at=masked))
    assert state.parity.render_grad_stage == "evaluating on vulkan (B)"
    second_b = controller.render_grad.sent[-1]
    assert second_b is not first_b and second_b.inputs["weight"] is masked["weight"]
    controller._parity_answer(state, _answer(second_b, grad=grad_a + np.array([0.0, b_off, 0.0, 0.0]), image=image_b))
    summary = state.parity.render_grad_summary
    assert state.parity.render_grad_stage == "" and "iteration 7" in summary
    assert ("cpu and vulkan agree" if b_off == 0.0 else "cpu and vulkan DIFFER") in summary, summary
    assert "over the 5 of 6 pixels" in summary and "whole image 0.25" in summary, summary


def _invert_snapshot(first: int, steps: int, *, images: bool = False, done: bool = False, status: str = "running",
                     line: str = "") -> dict:
    """An app.ui.services._invert_snapshot of steps first .. first + steps - 1 of a recovery (no worker)."""
    groups = ("joints", "gripper", "letter", "letter_angles")
    snapshot = {
        "names": np.array(["yaw"]), "name_groups": np.array(["joints"]), "units": np.array(["deg"]),
        "true": np.array([1.0]), "start": np.array([2.0]),
        "current": np.array([1.5]), "errors": {g: np.float64(0.5) for g in groups},
        "steps_from": np.int64(first), "losses": np.arange(first, first + steps, dtype=np.float64) + 1.0,
        "groups": np.array(groups), "group_units": np.array(["deg", "m", "units", "deg"]),
        "tolerances": np.array([0.5, 0.005, 0.01, 0.5]),
        "error_rows": np.full((steps, len(groups)), float(first)),
        "mark_steps": np.array([0, 0, 2], np.int64), "mark_texts": np.array(["identify", "start 1/1", "Adam (pyramid)"]),
        "iteration": np.int64(first + steps), "phase": np.array("Adam"),
        "done": np.bool_(done), "status": np.array(status), "verdict_line": np.array(line)}
    if images:
        snapshot.update(target=np.zeros((2, 4, 3), np.uint8), image=np.ones((2, 4, 3), np.uint8),
                        diff=np.zeros((2, 4, 3), np.uint8))
    return snapshot


def test_a_finished_recovery_s_status_reaches_the_view_and_stops_the_batches():
    from app.ui.controller import INVERT_IMAGE_EVERY_S
    from app.ui.panels.invert_panel import badge

    controller, state = _render_grad_controller()
    controller._invert_in_flight, controller._invert_started = False, None
    view = state.invert
    controller._invert_snapshot(state, _invert_snapshot(0, 0, images=True), reset=True)
    assert view.ready and view.status == "running" and not view.done and badge(view)[0] == "ready"
    view.running = True
    controller._keep_inverting(state)
    batch = controller.primary.sent[-1]
    assert batch.name.endswith("invert_run") and batch.inputs["image_every_s"] == INVERT_IMAGE_EVERY_S
    assert badge(view)[0] == "running"
    controller._invert_snapshot(state, _invert_snapshot(0, 3), reset=False)  # no images in this batch: kept
    assert view.image_iteration == 0 and view.image is not None and view.iteration == 3
    controller._invert_snapshot(state, _invert_snapshot(3, 2, images=True, done=True, status="not_converged",
                                                        line="NOT CONVERGED: wrist off by 8.35 deg (tolerance 0.5)"),
                                reset=False)
    assert view.done and not view.running and view.status == "not_converged" and view.verdict_line.startswith("NOT")
    assert view.losses == [1.0, 2.0, 3.0, 4.0, 5.0] and view.iteration == view.image_iteration == 5
    assert view.group_errors["gripper"] == [0.0, 0.0, 0.0, 3.0, 3.0] and view.tolerances[1] == 0.005
    assert view.marks == [(0, "identify"), (0, "start 1/1"), (2, "Adam (pyramid)")]
    assert badge(view)[0] == "not converged"
    view.running = True  # Start is disabled once done; nothing more is sent even so
    sent = len(controller.primary.sent)
    controller._keep_inverting(state)
    assert len(controller.primary.sent) == sent


def test_the_invert_panel_s_phase_marks_and_tolerance_dashes():
    from app.ui.panels.invert_panel import DASHES, dashed, phase_at

    marks = [(0, "identify"), (0, "start 1/3 (yaw +0 deg)"), (30, "start 2/3 (yaw +15 deg)"),
             (90, "Adam (pyramid, wide edges)"), (240, "Levenberg-Marquardt"), (250, "Adam diverged: back")]
    assert phase_at(marks, 0) == "start 1/3 (yaw +0 deg)" and phase_at(marks, 89.5) == "start 2/3 (yaw +15 deg)"
    assert phase_at(marks, 240) == "Levenberg-Marquardt" and phase_at(marks, -1) == ""
    xs, ys = dashed(0.0, 10.0, 0.5)
    assert len(xs) == 2 * DASHES and xs[0] == 0.0 and xs[-1] == 10.0 and set(ys) == {0.5}


def test_a_long_verdict_is_cut_at_a_word_to_fit_its_lines():
    import math

    from app.ui.panels.invert_panel import clipped

    def height_of(text: str) -> float:  # 10 characters a line, 10 pixels a line
        return 10.0 * math.ceil(len(text) / 10)

    assert clipped("CONVERGED", height_of, 20.0) == "CONVERGED"
    line = "NOT CONVERGED: yaw off by 6.47 deg (tolerance 0.5), wrist off by 28.7 deg"
    shown = clipped(line, height_of, 20.0)
    assert shown == "NOT CONVERGED: ..." and height_of(shown) <= 20.0  # with " yaw" it would take 3 lines


def test_the_error_plot_s_tooltip_gives_each_group_s_error_in_its_unit():
    from app.ui.panels.invert_panel import error_tooltip
    from app.ui.state import InvertView

    view = InvertView(groups=["joints", "gripper"], group_units=["deg", "m"], tolerances=[0.5, 0.005],
                      group_errors={"joints": [20.0, 16.57], "gripper": [0.03, 0.0213]},
                      marks=[(0, "identify"), (0, "start 1/3 (yaw +0 deg)")])
    assert error_tooltip(view, 1) == ("step 1: largest error per group (tolerance)\njoints: 16.6 deg (0.5)\n"
                                      "gripper: 0.0213 m (0.005)\nstart 1/3 (yaw +0 deg)")


def test_the_error_plot_spans_the_tolerances_and_the_largest_error():
    from app.ui.panels.invert_panel import ERROR_FLOOR_SHARE, error_range
    from app.ui.state import InvertView

    view = InvertView(groups=["joints", "gripper"], tolerances=[0.5, 0.005],
                      group_errors={"joints": [20.0, 0.0], "gripper": [0.03, 1e-9]})
    assert error_range(view) == (ERROR_FLOOR_SHARE * 0.005, 30.0)
    assert error_range(InvertView()) == (ERROR_FLOOR_SHARE, 3.0)  # before the first snapshot


def test_a_link_calls_on_answer_once_its_answer_is_queued():
    """The app wakes its window from `on_answer` (app.ui.app.wake_window): the woken frame must find the answer
    (the test takes it only after the call, so the queue held it when on_answer ran)."""
    from app.ui.links import Request, WorkerLink

    seen: list[int] = []
    link = WorkerLink("cpu", priorities=("render",), on_answer=lambda: seen.append(link.answers.qsize()))
    link.start()
    try:
        for k in range(2):
            link.send(Request("render", "affine", {"x": np.ones(4, np.float32)}))
            deadline = time.perf_counter() + 120.0  # the worker's start-up first
            while len(seen) <= k and time.perf_counter() < deadline:
                time.sleep(0.01)
            answer = link.answers.get(timeout=5.0)
            assert answer.outputs is not None and answer.outputs["y"].shape == (4,), answer.error
    finally:
        link.close()
    assert seen == [1, 1]


@pytest.mark.parametrize("ending", ["asked to leave", "killed"])
def test_a_busy_worker_asked_to_leave_at_the_windows_exit_keeps_what_it_compiled(ending, tmp_path, monkeypatch):
    """The window's exit asks every link to stop and a busy worker to leave after its current kernel
    (`WorkerLink.request_stop`, SIGUSR1): it leaves through Python's exit, which writes the kernel cache. A worker
    killed (the old exit, and one still running after the grace) leaves nothing: the contrast shows the test can
    fail."""
    from app.ui.links import Request, WorkerLink

    monkeypatch.setenv("TI_OFFLINE_CACHE_FILE_PATH", str(tmp_path / "cache"))  # the worker inherits it
    marker = tmp_path / "compiled"
    link = WorkerLink("cpu", priorities=("work",))
    link.start()
    try:
        link.send(Request("work", "tests.worker_faults:compile_then_hang", {"marker": str(marker)}))
        deadline = time.monotonic() + 120.0
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists() and link.in_flight, link.status
        worker = link._worker
        if ending == "killed":
            worker.kill()
        link.request_stop()  # returns at once; asked again, as the window's exit does (the worker ignores repeats)
        link.request_stop()
        link.close(wait_s=60.0)
        assert not worker.alive
    finally:
        link.close()
    cached = any(path.suffix == ".tic" for path in (tmp_path / "cache").rglob("*"))
    if ending == "killed":
        assert not cached and worker.exitcode == -9
    else:
        assert cached and worker.exitcode == 0, worker.exitcode
