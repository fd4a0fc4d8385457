"""Inverse-render panel: recover the robot arm's pose and the letter's from a rendered target.

Draws `state.invert`: target | current | |difference| (x4) images, the pose parameters
(true, start, current), the loss on a log scale, Start/Pause, Step, Reset, and the start
perturbation (a multiple of the default: joints 20 degrees, gripper 0.03 m, letter 0.2,
its angles 10 degrees) with its seed. Changing the perturbation or the seed restarts the
inversion. The work runs in the primary backend worker (app.ui.services.invert_*), like
the shape fit. The panel fits from the seeded start alone: it does not run `invert`'s multi-start
(`--starts`, app.scenes.invert.pick_start), so seeds 3, 5 and 7 end off the pose here (the seed's
tooltip says so).
"""
from __future__ import annotations

import numpy as np
from imgui_bundle import imgui, implot

from app.ui import colours
from app.ui.gl import Gfx
from app.ui.layout import flow
from app.ui.panels.run_controls import run_buttons, run_caption
from app.ui.state import AppState, Command, invert_reset_command

IMAGES = (("target", "target"), ("image", "current"), ("diff", "|difference| x4"))
COLUMNS = ("parameter", "true", "start", "current")
TABLE_SHARE = 0.65  # of the panel's width, at most, for the parameter table
EMPTY_PLOT_ITERATIONS = 100.0  # the loss plot's x range before the first iteration
NARROW_PLOT_EMS = 14  # a loss plot narrower than this many font sizes labels only the ends of its x axis


def draw(state: AppState, gfx: Gfx) -> None:
    _controls(state)
    view = state.invert
    if view.error:
        imgui.text_colored(colours.ERROR, f"inverse render failed: {view.error}")
    if view.image is None:
        imgui.text_disabled("setting up (the first time compiles the differentiable renderer)..." if view.busy
                            else "waiting for the backend")
        return
    _images(state, gfx)
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing.x
    rows = _rows(view)
    # the table as wide as its widest cells (up to TABLE_SHARE of the panel: a narrow one clipped its numbers),
    # the plot takes the rest
    table_width = min(_table_width(rows), avail.x * TABLE_SHARE)
    height = max(avail.y, 16.0)
    _table(rows, imgui.ImVec2(table_width, height))
    imgui.same_line()
    _loss_plot(state, imgui.ImVec2(max(avail.x - table_width - spacing, 16.0), height))


def _controls(state: AppState) -> None:
    view = state.invert
    changed = False
    imgui.set_next_item_width(imgui.get_font_size() * 6)
    c, view.perturbation = imgui.slider_float("perturbation", view.perturbation, 0.0, 1.5, "x %.2f")
    changed |= c
    imgui.set_item_tooltip("start = target moved by this times joints 20 deg, gripper 0.03 m, letter 0.2 "
                           "(position) and 10 deg (yaw, tilt), at least 3/4 of it per joint, seeded")
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 4)
    c, view.seed = imgui.input_int("seed", view.seed)
    changed |= c
    imgui.set_item_tooltip("the perturbation's seed; the panel fits from this one start (seeds 3, 5 and 7 do not "
                           "recover from theirs). `python -m app invert --starts 3` (its default) first tries three "
                           "starts spread over the base yaw and fits the best one")
    imgui.begin_disabled(not view.ready or view.busy)
    width = imgui.get_font_size() * 4
    flow(3 * width + 2 * imgui.get_style().item_spacing.x)  # the buttons wrap as one row in a narrow panel
    pressed = run_buttons(view.running, view.iteration >= view.max_iterations, width, "##invert")
    imgui.end_disabled()
    if pressed == "run":
        view.running = not view.running
    elif pressed == "step":
        view.running = False
        state.commands.append(Command("invert_step"))
    changed |= pressed == "reset"
    if changed:
        view.running = False
        state.commands.append(invert_reset_command(state))
    imgui.text_disabled(_caption(state))


def _caption(state: AppState) -> str:
    view = state.invert
    return run_caption(
        view.busy, view.ready, "the inversion", "waiting for the backend",
        f"iteration {view.iteration}/{view.max_iterations}", f"loss {view.losses[-1]:.3e}" if view.losses else "",
        f"joints off by {view.errors.get('joints', 0.0):.3f} deg, letter by {view.errors.get('letter', 0.0):.4f}"
        if view.errors else "", f"{view.iterations_per_s:.1f} it/s" if state.show_timings and view.running else "",
        "done: Reset to start over" if view.iteration >= view.max_iterations else "")


def _images(state: AppState, gfx: Gfx) -> None:
    view = state.invert
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing.x
    height, width = view.image.shape[:2]
    scale = min((avail.x - 2 * spacing) / (3 * width), avail.y * 0.4 / height)
    imgui.text_disabled("  |  ".join(label for _, label in IMAGES))
    size = imgui.ImVec2(max(width * scale, 8.0), max(height * scale, 8.0))
    for i, (key, label) in enumerate(IMAGES):
        if i:
            imgui.same_line()
        imgui.image(gfx.image(f"invert_{key}", getattr(view, key), view.image_version), size)
        imgui.set_item_tooltip(label)


def _rows(view) -> list[tuple[str, str, str, str]]:
    """The parameter table's header and rows, as text."""
    return [COLUMNS] + [(f"{name} ({unit})", f"{true:.3f}", f"{start:.3f}", f"{current:.3f}")
                        for name, unit, true, start, current in zip(view.names, view.units, view.true, view.start,
                                                                    view.current)]


def _text_widths(rows: list[tuple[str, str, str, str]]) -> list[float]:
    """Per column, the width of its widest text."""
    return [max(imgui.calc_text_size(row[i]).x for row in rows) for i in range(len(COLUMNS))]


def _table_width(rows: list[tuple[str, str, str, str]]) -> float:
    """The width that shows every cell of `rows` whole, with the table's padding and its scroll bar."""
    style = imgui.get_style()
    return sum(_text_widths(rows)) + len(COLUMNS) * 2 * style.cell_padding.x + style.scrollbar_size


def _table(rows: list[tuple[str, str, str, str]], size: imgui.ImVec2) -> None:
    flags = (imgui.TableFlags_.borders_inner_h | imgui.TableFlags_.scroll_y | imgui.TableFlags_.row_bg
             | imgui.TableFlags_.sizing_stretch_prop)
    if not imgui.begin_table("##invert_parameters", len(COLUMNS), flags, size):
        return
    for name, width in zip(COLUMNS, _text_widths(rows)):  # stretched in proportion to their text: a narrow table clips evenly
        imgui.table_setup_column(name, imgui.TableColumnFlags_.width_stretch, width)
    imgui.table_setup_scroll_freeze(0, 1)
    imgui.table_headers_row()
    for row in rows[1:]:
        imgui.table_next_row()
        for value in row:
            imgui.table_next_column()
            imgui.text(value)
    imgui.end_table()


def _loss_plot(state: AppState, size: imgui.ImVec2) -> None:
    losses = state.invert.losses
    if implot.begin_plot("image loss", size, implot.Flags_.no_legend):
        implot.setup_axes("iteration", "L2 loss (log)", implot.AxisFlags_.auto_fit, implot.AxisFlags_.auto_fit)
        implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
        last = max(len(losses) - 1, 1) if losses else EMPTY_PLOT_ITERATIONS
        if size.x < NARROW_PLOT_EMS * imgui.get_font_size():  # its six default ticks ran into each other
            implot.setup_axis_ticks(implot.ImAxis_.x1, 0.0, float(last), 2)
        if not losses:
            implot.setup_axes_limits(0.0, EMPTY_PLOT_ITERATIONS, 1e-6, 1e-2, implot.Cond_.always)
        else:
            ys = np.asarray(losses, dtype=np.float64)
            implot.plot_line("loss", np.arange(len(ys), dtype=np.float64), ys)
        implot.end_plot()
