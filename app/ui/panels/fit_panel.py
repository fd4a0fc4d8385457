"""Shape-fit panel: target and settings, Start/Pause/Step/Reset, loss plot, 3D view, export.

Draws `state.fit`; buttons queue `Command`s (reset, step, export) or flip
`fit.running`, which the controller turns into worker calls. Changing the target,
the subdivision, the learning rate or the smoothing restarts the fit with the new
settings. "iterations" sets where Start stops; once there, Start becomes Continue and
runs that many more. A mesh file can be picked with "Browse" (the in-window file dialog,
`app.ui.panels.file_dialog`) or typed into the path field. The 3D view frames the target and
the mesh until the user zooms or pans (left drag orbits, right or middle drag pans, the wheel
zooms, "Reset view" frames them again).
"""
from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
from imgui_bundle import imgui, implot

from app.scenes.fit_settings import MAX_SUBDIV, RECOMMENDED_ITERS
from app.scenes.fit_settings import TARGETS as FIT_TARGETS
from app.ui import colours
from app.ui.gl import MESH_FOV_Y, Gfx
from app.ui.layout import flow, labelled_width
from app.ui.panels import file_dialog
from app.ui.panels.run_controls import run_buttons, run_caption
from app.ui.state import FIT_HOME, AppState, Command, reset_command

MAX_ITERATIONS = 100_000
FRAME_MARGIN = 1.08  # the framed meshes keep this much room around their bounding sphere


def toggle_run(state: AppState) -> None:
    """Start, Pause or Continue (past the iteration count, by that many again)."""
    fit = state.fit
    if not fit.ready:
        return
    if not fit.running and fit.iteration >= fit.max_iterations:
        fit.max_iterations = fit.iteration + max(fit.max_iterations, 1)
    fit.running = not fit.running


def step(state: AppState) -> None:
    if state.fit.ready:
        state.fit.running = False
        state.commands.append(Command("fit_step"))


def reset(state: AppState) -> None:
    if state.fit.ready or state.fit.error:
        state.fit.running = False
        state.commands.append(reset_command(state))


def reset_view(state: AppState) -> None:
    state.fit.orbit, state.fit.auto_frame = replace(FIT_HOME), True


def framing_distance(radius: float, aspect: float) -> float:
    """Camera distance at which a sphere of `radius` fills the narrower of the view's two angles."""
    half_y = MESH_FOV_Y / 2.0
    half = min(half_y, math.atan(math.tan(half_y) * aspect))
    return FRAME_MARGIN * radius / math.sin(half)


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
    em = imgui.get_font_size()
    changed = False
    label = fit.target if fit.target in FIT_TARGETS else os.path.basename(fit.target)
    imgui.set_next_item_width(em * 6)
    if imgui.begin_combo("target", label):
        for name in FIT_TARGETS:
            if imgui.selectable(name, name == fit.target)[0] and name != fit.target:
                fit.target, changed = name, True
        imgui.end_combo()
    flow(labelled_width(em * 3.5, "subdiv"))
    imgui.set_next_item_width(em * 3.5)
    c, fit.subdiv = imgui.slider_int("subdiv", fit.subdiv, 0, MAX_SUBDIV)
    changed |= c
    flow(labelled_width(em * 3.5, "lr"))
    imgui.set_next_item_width(em * 3.5)
    c, fit.lr = imgui.input_float("lr", fit.lr, 0.0, 0.0, "%.3f")
    changed |= c and fit.lr > 0.0
    flow(labelled_width(em * 4.5, "") + labelled_width(em * 4.5, "smoothing") + imgui.get_style().item_spacing.x)
    imgui.set_next_item_width(em * 4.5)
    c, fit.smooth = imgui.slider_float("##smooth", fit.smooth, 0.0, 1.0, "from %.2f")
    changed |= c
    imgui.same_line()
    imgui.set_next_item_width(em * 4.5)
    c, fit.smooth_end = imgui.slider_float("smoothing", fit.smooth_end, 0.0, 1.0, "to %.2f")
    changed |= c
    imgui.set_item_tooltip("Laplacian shrink-wrap step size: falls linearly from the first value to the second over "
                           f"{fit.max_iterations} iterations (set at Reset)")
    imgui.set_next_item_width(-em * 9)
    _, fit.path_input = imgui.input_text_with_hint("##mesh_path", "mesh file (.obj .ply .stl .off .glb)", fit.path_input)
    imgui.same_line()
    if imgui.button("Open") and fit.path_input.strip():
        fit.target, changed = os.path.abspath(os.path.expanduser(fit.path_input.strip())), True
    imgui.same_line()
    if imgui.button("Browse"):
        file_dialog.open_dialog(state, "open_mesh", fit.target if os.path.isfile(fit.target) else "")
    if changed:
        fit.running = False
        state.commands.append(reset_command(state))


def _controls(state: AppState) -> None:
    fit = state.fit
    em = imgui.get_font_size()
    imgui.begin_disabled(not fit.ready)
    pressed = run_buttons(fit.running, fit.iteration >= fit.max_iterations, em * 4.5,
                          continue_tip=f"run {fit.max_iterations} more iterations")
    if pressed == "run":
        toggle_run(state)
    elif pressed == "step":
        step(state)
    elif pressed == "reset":
        reset(state)
    flow(labelled_width(em * 5, "iterations"))
    imgui.set_next_item_width(em * 5)
    _, count = imgui.input_int("iterations", fit.max_iterations, 0, 0)
    fit.max_iterations = min(max(count, 1), MAX_ITERATIONS)
    imgui.set_item_tooltip("Start stops at this iteration (Continue then runs as many again); "
                           "the smoothing schedule spans it from the next Reset")
    flow(em * 8 + imgui.calc_text_size("Export").x + imgui.get_style().frame_padding.x * 2
         + imgui.get_style().item_spacing.x)
    imgui.set_next_item_width(em * 8)
    _, fit.export_path = imgui.input_text("##export_path", fit.export_path)
    imgui.same_line()
    if imgui.button("Export"):
        state.commands.append(Command("fit_export", {"path": os.path.abspath(fit.export_path)}))
    imgui.end_disabled()
    imgui.text_disabled(_progress_caption(state))


def _progress_caption(state: AppState) -> str:
    fit = state.fit
    return run_caption(
        fit.busy, fit.ready, "the fit", "" if fit.error else f"waiting for the {state.arch} backend",
        f"iteration {fit.iteration}", f"loss {fit.losses[-1]:.3e}" if fit.losses else "",
        f"done: Continue runs {fit.max_iterations} more" if fit.iteration >= fit.max_iterations and not fit.running
        else "", f"{fit.iterations_per_s:.1f} it/s" if state.show_timings and fit.running else "",
        f"wrote {os.path.basename(fit.exported)}" if fit.exported else "")


def _mesh_view(state: AppState, gfx: Gfx, size: imgui.ImVec2) -> None:
    fit = state.fit
    if fit.vertices is not None:
        gfx.mesh_view.set_mesh(fit.mesh_version, fit.vertices, fit.faces)
    if fit.target_vertices is not None:
        gfx.mesh_view.set_target(fit.target_version, fit.target_vertices, fit.target_faces)
    if fit.auto_frame:
        fit.orbit.distance = framing_distance(fit.frame_radius, size.x / max(size.y, 1.0))
    imgui.begin_group()  # the image with its overlays, so that the loss plot goes beside it
    origin = imgui.get_cursor_screen_pos()
    orbit = fit.orbit
    texture = gfx.mesh_view.render((int(size.x), int(size.y)), orbit.yaw, orbit.pitch, orbit.distance, orbit.center)
    imgui.image(texture, size, imgui.ImVec2(0, 1), imgui.ImVec2(1, 0))  # GL rows run bottom-up
    if imgui.is_item_hovered():
        io = imgui.get_io()
        if imgui.is_mouse_down(imgui.MouseButton_.left):
            orbit.yaw = (orbit.yaw - io.mouse_delta.x * 0.5) % 360.0
            orbit.pitch = min(max(orbit.pitch + io.mouse_delta.y * 0.5, -89.0), 89.0)
        elif imgui.is_mouse_down(imgui.MouseButton_.right) or imgui.is_mouse_down(imgui.MouseButton_.middle):
            if io.mouse_delta.x or io.mouse_delta.y:
                orbit.pan(io.mouse_delta.x, io.mouse_delta.y, math.degrees(MESH_FOV_Y), size.y)
                fit.auto_frame = False
        if io.mouse_wheel:
            orbit.distance = min(max(orbit.distance * 0.9 ** io.mouse_wheel, 1.2), 20.0)
            fit.auto_frame = False
    draw_list = imgui.get_window_draw_list()
    draw_list.push_clip_rect(origin, imgui.ImVec2(origin.x + size.x, origin.y + size.y), True)
    draw_list.add_text(imgui.ImVec2(origin.x + 6, origin.y + 4), imgui.get_color_u32(imgui.Col_.text),
                       "mesh (orange), target (blue)")
    draw_list.pop_clip_rect()
    imgui.set_cursor_screen_pos(imgui.ImVec2(origin.x + 6, origin.y + size.y - imgui.get_frame_height() - 6))
    if imgui.small_button("Reset view##fit"):
        reset_view(state)
    imgui.end_group()


def _loss_plot(state: AppState, size: imgui.ImVec2) -> None:
    losses = state.fit.losses
    orders = ""
    if len(losses) > 1:
        first, last = losses[0], losses[-1]
        orders = f": {math.log10(first / last):.2f} orders down" if last > 0 else ": loss reached 0"
    if implot.begin_plot(f"Chamfer loss{orders}###loss", size):
        implot.setup_axes("iteration", "mean sq. distance (log)",
                          implot.AxisFlags_.auto_fit, implot.AxisFlags_.auto_fit)
        implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
        implot.setup_legend(implot.Location_.north_east)
        if not losses:  # auto-fit has nothing to fit yet: show a sensible empty range
            implot.setup_axes_limits(0.0, float(RECOMMENDED_ITERS), 1e-4, 1.0, implot.Cond_.always)
        ys = np.asarray(losses if losses else [np.nan], dtype=np.float64)
        implot.plot_line("Chamfer loss", np.arange(len(ys), dtype=np.float64), ys)
        if implot.is_axis_hovered(implot.ImAxis_.y1):
            imgui.set_tooltip("mean squared distance from the mesh to the target plus from the target to the mesh, "
                              "in the target's normalised units (its largest half-extent is 1)")
        implot.end_plot()
