"""Shape-fit panel: target and settings, Start/Pause/Step/Reset, loss plot, 3D view, export.

Draws `state.fit`; buttons queue `Command`s (reset, step, export) or flip
`fit.running`, which the controller turns into worker calls. Changing the target,
the subdivision, the learning rate or the smoothing restarts the fit with the new
settings. A mesh file can be picked with "Browse" (ImFileDialog, drawn by ImGui inside the
window, so it works wherever the app does, Xvfb included) or typed into the path field.
"""
from __future__ import annotations

import math
import os

import numpy as np
from imgui_bundle import imgui, implot

from app.ui import colours
from app.ui.gl import Gfx
from app.scenes.fit_settings import MAX_SUBDIV
from app.ui.state import FIT_TARGETS, AppState, Command, reset_command

DIALOG_KEY = "open_target_mesh"
MESH_FILTER = "Mesh files (*.obj;*.ply;*.stl;*.off;*.glb){.obj,.ply,.stl,.off,.glb},.*"


def draw(state: AppState, gfx: Gfx) -> None:
    _settings(state)
    _controls(state)
    if state.fit.error:
        imgui.text_colored(colours.ERROR, f"fit failed: {state.fit.error}")
    avail = imgui.get_content_region_avail()
    half = imgui.ImVec2(max((avail.x - imgui.get_style().item_spacing.x) / 2, 16.0), max(avail.y, 16.0))
    _mesh_view(state, gfx, half)
    imgui.same_line()
    _loss_plot(state, half)


def _settings(state: AppState) -> None:
    fit = state.fit
    changed = False
    label = fit.target if fit.target in FIT_TARGETS else os.path.basename(fit.target)
    imgui.set_next_item_width(imgui.get_font_size() * 6)
    if imgui.begin_combo("target", label):
        for name in FIT_TARGETS:
            if imgui.selectable(name, name == fit.target)[0] and name != fit.target:
                fit.target, changed = name, True
        imgui.end_combo()
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 3.5)
    c, fit.subdiv = imgui.slider_int("subdiv", fit.subdiv, 0, MAX_SUBDIV)
    changed |= c
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 3.5)
    c, fit.lr = imgui.input_float("lr", fit.lr, 0.0, 0.0, "%.3f")
    changed |= c and fit.lr > 0.0
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 4)
    c, fit.smooth = imgui.slider_float("##smooth", fit.smooth, 0.0, 1.0, "%.2f")
    changed |= c
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 4)
    c, fit.smooth_end = imgui.slider_float("smoothing", fit.smooth_end, 0.0, 1.0, "-> %.2f")
    changed |= c
    imgui.set_item_tooltip("Laplacian shrink-wrap step size: falls linearly from the first value to the second over "
                           f"{fit.max_iterations} iterations")
    imgui.set_next_item_width(-imgui.get_font_size() * 9)
    _, fit.path_input = imgui.input_text_with_hint("##mesh_path", "mesh file (.obj .ply .stl .off .glb)", fit.path_input)
    imgui.same_line()
    if imgui.button("Open") and fit.path_input.strip():
        fit.target, changed = os.path.abspath(os.path.expanduser(fit.path_input.strip())), True
    imgui.same_line()
    changed |= _browse(state)
    if changed:
        fit.running = False
        state.commands.append(reset_command(state))


def _browse(state: AppState) -> bool:
    """The "Browse" button and the file dialog it opens (drawn by ImGui, in the window); True once a file was picked."""
    from imgui_bundle import im_file_dialog

    dialogs = im_file_dialog.FileDialog.instance()
    if imgui.button("Browse"):
        folder = os.path.dirname(state.fit.target) if os.path.isfile(state.fit.target) else os.getcwd()
        dialogs.open(DIALOG_KEY, "Open a target mesh", MESH_FILTER, False, folder)
    if not dialogs.is_done(DIALOG_KEY):
        return False
    picked = dialogs.get_result().path() if dialogs.has_result() else ""
    dialogs.close()
    if picked:
        state.fit.path_input = state.fit.target = picked
    return bool(picked)


def _controls(state: AppState) -> None:
    fit = state.fit
    imgui.begin_disabled(not fit.ready)
    width = imgui.ImVec2(imgui.get_font_size() * 4, 0)
    done = fit.iteration >= fit.max_iterations
    imgui.begin_disabled(done and not fit.running)
    if imgui.button("Pause" if fit.running else "Start", width):
        fit.running = not fit.running
    imgui.end_disabled()
    imgui.same_line()
    if imgui.button("Step", width):
        fit.running = False
        state.commands.append(Command("fit_step"))
    imgui.same_line()
    if imgui.button("Reset", width):
        fit.running = False
        state.commands.append(reset_command(state))
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 8)
    _, fit.export_path = imgui.input_text("##export_path", fit.export_path)
    imgui.same_line()
    if imgui.button("Export"):
        state.commands.append(Command("fit_export", {"path": os.path.abspath(fit.export_path)}))
    imgui.end_disabled()
    imgui.text_disabled(_progress_caption(state))


def _progress_caption(state: AppState) -> str:
    fit = state.fit
    if fit.busy:
        return "setting up the fit..."
    if not fit.ready:
        return "waiting for the backend"
    loss = f" | loss {fit.losses[-1]:.3e}" if fit.losses else ""
    if fit.iteration >= fit.max_iterations:
        loss += f" | done ({fit.max_iterations} iterations): Reset to start over"
    speed = f" | {fit.iterations_per_s:.1f} it/s" if state.show_timings and fit.running else ""
    exported = f" | wrote {os.path.basename(fit.exported)}" if fit.exported else ""
    return f"iteration {fit.iteration}{loss}{speed}{exported}"


def _mesh_view(state: AppState, gfx: Gfx, size: imgui.ImVec2) -> None:
    fit = state.fit
    if fit.vertices is not None:
        gfx.mesh_view.set_mesh(fit.mesh_version, fit.vertices, fit.faces)
    if fit.target_vertices is not None:
        gfx.mesh_view.set_target(fit.target_version, fit.target_vertices, fit.target_faces)
    origin = imgui.get_cursor_screen_pos()
    texture = gfx.mesh_view.render((int(size.x), int(size.y)), fit.orbit.yaw, fit.orbit.pitch, fit.orbit.distance)
    imgui.image(texture, size, imgui.ImVec2(0, 1), imgui.ImVec2(1, 0))  # GL rows run bottom-up
    if imgui.is_item_hovered():
        io = imgui.get_io()
        if imgui.is_mouse_down(imgui.MouseButton_.left):
            fit.orbit.yaw = (fit.orbit.yaw - io.mouse_delta.x * 0.5) % 360.0
            fit.orbit.pitch = min(max(fit.orbit.pitch + io.mouse_delta.y * 0.5, -89.0), 89.0)
        if io.mouse_wheel:
            fit.orbit.distance = min(max(fit.orbit.distance * 0.9 ** io.mouse_wheel, 1.2), 10.0)
    imgui.get_window_draw_list().add_text(imgui.ImVec2(origin.x + 6, origin.y + 4), imgui.get_color_u32(imgui.Col_.text),
                                          "mesh (orange) vs target (blue wireframe)")


def _loss_plot(state: AppState, size: imgui.ImVec2) -> None:
    losses = state.fit.losses
    if implot.begin_plot("Chamfer loss", size, implot.Flags_.no_legend):
        implot.setup_axes("iteration", "", implot.AxisFlags_.auto_fit, implot.AxisFlags_.auto_fit)
        implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
        if not losses:  # auto-fit has nothing to fit yet: show a sensible empty range
            implot.setup_axes_limits(0.0, 100.0, 1e-4, 1.0, implot.Cond_.always)
        if losses:
            ys = np.asarray(losses, dtype=np.float64)
            implot.plot_line("loss", np.arange(len(ys), dtype=np.float64), ys)
            if len(ys) > 1:
                orders = math.log10(ys[0] / ys[-1]) if ys[-1] > 0 else float("inf")
                implot.tag_y(ys[-1], imgui.ImVec4(1.0, 0.7, 0.3, 1.0), f"{orders:.2f} orders")
        implot.end_plot()
