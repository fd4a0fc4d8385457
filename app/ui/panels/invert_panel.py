"""Inverse-render panel: recover the robot arm's pose and the letter's from a rendered target, as `python -m app invert`
does.

The panel runs the recovery that `invert` runs, with its default schedule (app.scenes.inverse_render.Recovery: the
identifiability at the start, a CMA-ES search on the half-resolution image, a Levenberg-Marquardt polish, scans of
every parameter while the image says the fit is not there; the module docstring there says why), in the primary
backend worker (app.ui.services.invert_*), a batch of
steps at a time. It draws `state.invert`:

- a status badge: running (grey; "ready" or "paused" when nothing runs), converged (green), not converged or
  interrupted (amber), diverged or failed (red), then the step, the phase and the errors; once done, the verdict
  line (app.scenes.inverse_render.verdict_line: what is off, by how much, what the picture cannot determine);
- target | current | |difference| (x4) images and the step they show, renewed about once a second while the
  recovery runs (app.ui.controller.INVERT_IMAGE_EVERY_S) and at every Step; once done they show the result (the
  best iterate);
- the pose parameters (true, start, current: once done, the result);
- the loss of every step on a log scale (the loss its optimiser minimised: the search's half-resolution loss, the
  Levenberg-Marquardt residual's), with a vertical line where each phase begins (hover for its name);
- below it, on the same step axis, the largest parameter error per group per step on a log scale, each group's
  tolerance dashed in its colour (a recovered group ends below its line); the table's parameter names are in
  their group's colour, and hovering the plot gives each group's error in its unit (degrees, m, units).

Start/Pause, Step (one step), Reset, and the start perturbation (a multiple of the default: joints 20 degrees,
gripper 0.03 m, letter 0.2, its angles 10 degrees) with its seed. Changing the perturbation or the seed restarts the
recovery. Its end ("done") comes from the worker, not from a step count: its phases end early (the
Levenberg-Marquardt polish once its steps vanish, the restarts once the image is matched).
"""
from __future__ import annotations

import numpy as np
from imgui_bundle import imgui, implot

from app.ui import colours
from app.ui.gl import Gfx
from app.ui.layout import flow
from app.ui.panels.run_controls import run_buttons, run_caption
from app.ui.state import AppState, Command, InvertView, invert_reset_command

IMAGES = (("target", "target"), ("image", "current"), ("diff", "|difference| x4"))
COLUMNS = ("parameter", "true", "start", "current")
TABLE_SHARE = 0.65  # of the panel's width, at most, for the parameter table
EMPTY_PLOT_STEPS = 100.0  # the plots' x range before the first step
NARROW_PLOT_EMS = 14  # a plot narrower than this many font sizes labels only the ends of its x axis
LOSS_SHARE = 0.45  # of the plots' height, for the loss plot (the error plot below it has the step axis's labels)
ERROR_FLOOR_SHARE = 0.05  # the error plot's bottom: this times the smallest tolerance (lower errors are drawn there)
LOSS_FLOOR = 1e-12  # losses at or below this are drawn at it: a log axis has no 0
DASHES = 24  # dashes per tolerance line
TALL_PANEL_LINES = 32  # a panel taller than this many lines of text shows two lines of the verdict, else one
STATUS_COLOURS = {"converged": colours.OK, "not_converged": colours.WARNING, "interrupted": colours.WARNING,
                  "diverged": colours.ERROR, "failed": colours.ERROR}
MARK_COLOUR = imgui.ImVec4(0.62, 0.62, 0.62, 0.7)
BADGE_TEXT = imgui.ImVec4(0.0, 0.0, 0.0, 1.0)


def draw(state: AppState, gfx: Gfx) -> None:
    _controls(state)
    view = state.invert
    if view.error:
        imgui.text_colored(colours.ERROR, f"inverse render failed: {view.error}")
    if view.image is None:
        imgui.text_disabled(f"setting up ({state.compiling or 'loading the differentiable renderer'})..."
                            if view.busy else "waiting for the backend")
        return
    _images(state, gfx)
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing
    rows = _rows(view)
    # the table as wide as its widest cells (up to TABLE_SHARE of the panel: a narrow one clipped its numbers),
    # the plots take the rest, one above the other
    table_width = min(_table_width(rows), avail.x * TABLE_SHARE)
    height = max(avail.y, 32.0)
    _table(rows, [group_colour(view, group) for group in view.name_groups], imgui.ImVec2(table_width, height))
    imgui.same_line()
    _plots(view, imgui.ImVec2(max(avail.x - table_width - spacing.x, 16.0), height))


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
    imgui.set_item_tooltip("the perturbation's seed. The recovery is `python -m app invert`'s: it first tries three "
                           "starts spread over the base yaw and continues from the best one")
    imgui.begin_disabled(not view.ready or view.busy)
    width = imgui.get_font_size() * 4
    flow(3 * width + 2 * imgui.get_style().item_spacing.x)  # the buttons wrap as one row in a narrow panel
    pressed = run_buttons(view.running, view.done, width, "##invert")
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
    if view.ready and not view.busy:
        _badge(*badge(view))
        imgui.same_line()
    imgui.text_disabled(_caption(state))
    if view.done and view.verdict_line:  # a line of it (two in a tall panel); all of it in a tooltip
        avail = imgui.get_content_region_avail()
        line = imgui.get_text_line_height()
        lines = 2 if avail.y > TALL_PANEL_LINES * line else 1
        shown = clipped(view.verdict_line, lambda text: imgui.calc_text_size(text, False, avail.x).y,
                        lines * line + 1.0)
        imgui.push_text_wrap_pos(0.0)
        imgui.text_colored(STATUS_COLOURS.get(view.status, colours.NEUTRAL), shown)
        imgui.pop_text_wrap_pos()
        if shown != view.verdict_line:
            imgui.set_item_tooltip(view.verdict_line)


def badge(view: InvertView) -> tuple[str, imgui.ImVec4]:
    """The status badge's text and colour."""
    if view.done:
        return view.status.replace("_", " "), STATUS_COLOURS.get(view.status, colours.NEUTRAL)
    return ("running" if view.running else "paused" if view.iteration else "ready"), colours.NEUTRAL


def clipped(text: str, height_of, most: float) -> str:
    """`text`, or as many of its words as fit in `most` (pixels of wrapped height, `height_of(text)`) followed by
    " ..." """
    if height_of(text) <= most:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)  # the most words that fit with the ellipsis: binary search
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if height_of(" ".join(words[:mid]) + " ...") <= most:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " ..."


def _badge(text: str, colour: imgui.ImVec4) -> None:
    """`text` in dark letters on a rounded box of `colour`, as tall as a line of text."""
    pad = imgui.get_style().frame_padding.x
    size = imgui.calc_text_size(text)
    corner = imgui.get_cursor_screen_pos()
    end = imgui.ImVec2(corner.x + size.x + 2 * pad, corner.y + size.y)
    draw_list = imgui.get_window_draw_list()
    draw_list.add_rect_filled(corner, end, imgui.get_color_u32(colour), size.y * 0.3)
    draw_list.add_text(imgui.ImVec2(corner.x + pad, corner.y), imgui.get_color_u32(BADGE_TEXT), text)
    imgui.dummy(imgui.ImVec2(size.x + 2 * pad, size.y))


def _caption(state: AppState) -> str:
    view = state.invert
    return run_caption(
        view.busy, view.ready, "the inversion", "waiting for the backend",
        f"step {view.iteration}" + (f" ({view.phase})" if view.phase else ""),
        "done: Reset to start over" if view.done else "", f"loss {view.losses[-1]:.3e}" if view.losses else "",
        f"joints off by {view.errors.get('joints', 0.0):.3f} deg, letter by {view.errors.get('letter', 0.0):.4f}"
        if view.errors else "", f"{view.iterations_per_s:.1f} it/s" if state.show_timings and view.running else "")


def _images(state: AppState, gfx: Gfx) -> None:
    view = state.invert
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing.x
    height, width = view.image.shape[:2]
    scale = min((avail.x - 2 * spacing) / (3 * width), avail.y * 0.4 / height)
    imgui.text_disabled("  |  ".join(label for _, label in IMAGES)
                        + (f"   (step {view.image_iteration})" if view.iteration else ""))
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


def group_colour(view: InvertView, group: str) -> imgui.ImVec4:
    """The colour of `group`'s line in the error plot (ImPlot's colour map, in `view.groups` order)."""
    return implot.get_colormap_color(view.groups.index(group)) if group in view.groups else colours.NEUTRAL


def _table(rows: list[tuple[str, str, str, str]], name_colours: list[imgui.ImVec4], size: imgui.ImVec2) -> None:
    """The parameter table, each name in its group's colour (the error plot's legend)."""
    flags = (imgui.TableFlags_.borders_inner_h | imgui.TableFlags_.scroll_y | imgui.TableFlags_.row_bg
             | imgui.TableFlags_.sizing_stretch_prop)
    if not imgui.begin_table("##invert_parameters", len(COLUMNS), flags, size):
        return
    for name, width in zip(COLUMNS, _text_widths(rows)):  # stretched in proportion to their text: a narrow table clips evenly
        imgui.table_setup_column(name, imgui.TableColumnFlags_.width_stretch, width)
    imgui.table_setup_scroll_freeze(0, 1)
    imgui.table_headers_row()
    for row, colour in zip(rows[1:], name_colours):
        imgui.table_next_row()
        for k, value in enumerate(row):
            imgui.table_next_column()
            if k:
                imgui.text(value)
            else:
                imgui.text_colored(colour, value)
    imgui.end_table()


def phase_at(marks: list[tuple[int, str]], step: float) -> str:
    """The text of the last mark at or before `step` ("" before the first)."""
    return next((text for at, text in reversed(marks) if at <= step), "")


def dashed(x0: float, x1: float, y: float) -> tuple[np.ndarray, np.ndarray]:
    """xs, ys of DASHES segments along y from x0 to x1 (ImPlot's segments flag draws points 2k -> 2k + 1)."""
    ends = np.linspace(x0, x1, 2 * DASHES)
    return ends, np.full_like(ends, y)


def _plots(view: InvertView, size: imgui.ImVec2) -> None:
    """The loss plot above the error plot, their step axes linked and aligned."""
    flags = implot.SubplotFlags_.no_title | implot.SubplotFlags_.link_all_x | implot.SubplotFlags_.no_menus
    if implot.begin_subplots("##invert_plots", 2, 1, size, flags,
                             implot.SubplotsRowColRatios([LOSS_SHARE, 1.0 - LOSS_SHARE], [1.0])):
        steps = max(len(view.losses), 1)
        last = float(steps - 1) if view.losses else EMPTY_PLOT_STEPS
        _loss_plot(view, size, last)
        _error_plot(view, size, last)
        implot.end_subplots()


def _x_axis(size: imgui.ImVec2, last: float, label: str | None) -> None:
    """The step axis: labelled `label` (None: no label, no tick labels), two ticks in a narrow plot."""
    flags = implot.AxisFlags_.auto_fit if label else implot.AxisFlags_.auto_fit | implot.AxisFlags_.no_tick_labels
    implot.setup_axis(implot.ImAxis_.x1, label or "", flags)
    if size.x < NARROW_PLOT_EMS * imgui.get_font_size():  # its six default ticks ran into each other
        implot.setup_axis_ticks(implot.ImAxis_.x1, 0.0, max(last, 1.0), 2)


def _phase_lines(view: InvertView) -> None:
    """A vertical line where each phase begins (not at step 0: every run begins there)."""
    steps = np.array([step for step, _ in view.marks if step > 0], np.float64)
    if steps.size:
        implot.plot_inf_lines("##phases", steps, implot.Spec(line_color=MARK_COLOUR))


def _hovered_step(last: float) -> int | None:
    """The step under the pointer while it is over the current plot."""
    if not implot.is_plot_hovered():
        return None
    return int(round(min(max(implot.get_plot_mouse_pos().x, 0.0), last)))


def _loss_plot(view: InvertView, size: imgui.ImVec2, last: float) -> None:
    losses = view.losses
    if implot.begin_plot("##invert_loss", imgui.ImVec2(-1, 0), implot.Flags_.no_legend | implot.Flags_.no_title):
        _x_axis(size, last, None)
        implot.setup_axis(implot.ImAxis_.y1, "loss (log)", implot.AxisFlags_.auto_fit)
        implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
        if not losses:
            implot.setup_axes_limits(0.0, EMPTY_PLOT_STEPS, 1e-6, 1e-2, implot.Cond_.always)
        else:
            ys = np.maximum(np.asarray(losses, dtype=np.float64), LOSS_FLOOR)
            implot.plot_line("loss", np.arange(len(ys), dtype=np.float64), ys)
        _phase_lines(view)
        step = _hovered_step(last)
        if step is not None and step < len(losses):
            imgui.set_tooltip(f"step {step}: loss {losses[step]:.3e}\n{phase_at(view.marks, step)}")
        implot.end_plot()


def _error_plot(view: InvertView, size: imgui.ImVec2, last: float) -> None:
    """Per group, its largest error per step in its colour (the table's names are its legend), and its tolerance
    dashed in the same colour."""
    if implot.begin_plot("##invert_errors", imgui.ImVec2(-1, 0), implot.Flags_.no_legend | implot.Flags_.no_title):
        _x_axis(size, last, "step")
        implot.setup_axis(implot.ImAxis_.y1, "error (log)")
        implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
        lo, hi = error_range(view)
        implot.setup_axis_limits(implot.ImAxis_.y1, lo, hi, implot.Cond_.always)
        if not view.losses:
            implot.setup_axis_limits(implot.ImAxis_.x1, 0.0, EMPTY_PLOT_STEPS, implot.Cond_.always)
        for group, tolerance in zip(view.groups, view.tolerances):
            series = view.group_errors.get(group, [])
            colour = group_colour(view, group)
            if series:
                ys = np.maximum(np.asarray(series, np.float64), lo)
                implot.plot_line(group, np.arange(len(ys), dtype=np.float64), ys, implot.Spec(line_color=colour))
            xs, ys = dashed(0.0, last, tolerance)
            implot.plot_line(f"{group} tolerance", xs, ys,
                             implot.Spec(line_color=colour, flags=implot.LineFlags_.segments))
        _phase_lines(view)
        step = _hovered_step(last)
        if step is not None:
            imgui.set_tooltip(error_tooltip(view, step))
        implot.end_plot()


def error_range(view: InvertView) -> tuple[float, float]:
    """The error plot's y range: from ERROR_FLOOR_SHARE of the smallest tolerance (what a recovered parameter is
    within; far below it, an exact 0 included, nothing more is to be seen) to above the largest error and twice the
    largest tolerance."""
    tolerances = view.tolerances or [1.0]
    peak = max([max(series) for series in view.group_errors.values() if series] + [2.0 * max(tolerances)])
    return ERROR_FLOOR_SHARE * min(tolerances), 1.5 * peak


def error_tooltip(view: InvertView, step: int) -> str:
    """What the error plot says at `step`: each group's error and tolerance in its unit, and the phase."""
    lines = [f"step {step}: largest error per group (tolerance)"]
    for group, unit, tolerance in zip(view.groups, view.group_units, view.tolerances):
        series = view.group_errors.get(group, [])
        if step < len(series):
            lines.append(f"{group.replace('_', ' ')}: {series[step]:.3g} {unit} ({tolerance:g})")
    lines.append(phase_at(view.marks, step))
    return "\n".join(line for line in lines if line)
