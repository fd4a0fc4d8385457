"""The desktop app's pieces that need no window: camera framing and panning, the file dialog's
listing, the heat map's colour bar, the start-up progress count and the menu's shortcut table."""
from __future__ import annotations

import math

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


def test_heatmap_colour_bar_matches_the_heat_map():
    atol = 1e-4
    lo, hi = image_io.diff_heatmap_range(atol)
    a = np.zeros((1, 3))
    ends = image_io.diff_heatmap(a, np.array([[10 ** lo, 10 ** hi, 10 ** hi * 10]]), atol)[0]
    stops = np.round(image_io.heatmap_colours() * 255).astype(np.uint8)
    np.testing.assert_array_equal(ends[0], stops[0])
    np.testing.assert_array_equal(ends[1], stops[-1])
    np.testing.assert_array_equal(ends[2], stops[-1])  # beyond the bar's top: its top colour


class _Link:
    def __init__(self, status: str, in_flight: str = ""):
        self.status, self.in_flight, self.backend = status, in_flight, {"arch": "cpu"}


def test_start_up_progress_counts_finished_steps():
    state = AppState(arch="cpu", parity_arch="vulkan", show_timings=False)
    controller = Controller.__new__(Controller)  # no worker links: the counting alone
    controller.primary = _Link("busy", "app.ui.services:render_frame")
    controller.parity = _Link("starting")
    controller._first_calls = {controller.primary: {"render_frame", "fit_reset"},
                               controller.parity: {"render_frame", "fit_gradient_at"}}
    controller._started_at = {}
    Controller._link_status(controller, state)
    total = sum(1 + len(steps) for steps in START_UP.values())
    assert (state.warmup_done, state.warmup_total) == (1, total)  # the primary backend has started
    assert state.warmup == ["compiling the ray-march kernel on cpu", "starting the vulkan (parity) backend"]
    controller._first_calls[controller.primary].discard("render_frame")
    controller.parity = _Link("unavailable: no Vulkan")
    controller._first_calls[controller.parity] = {"render_frame", "fit_gradient_at"}
    Controller._link_status(controller, state)
    assert state.warmup_done == 2 + 1 + len(START_UP["parity"])  # an unavailable worker has nothing left to do


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
