"""Parity panel: the live difference between the primary and the parity backend.

The controller renders the frame on screen again on the parity backend (its own
worker process) and `app.ui.parity_summary.summarise` compares the two off the UI thread; this panel draws
the result: the share of values within the tolerance and the max error (where it is: in
a tooltip), then |A - B| as a heat map (log scale over the data's own range, so that backends
that agree to 1e-7 still show where they differ) with its worst pixels ringed (red: outside the
tolerance) and its colour bar with the tolerance marked, and a histogram of log10 |A - B| over
every value with log counts (most values agree exactly, so a linear count axis shows one bar).
It says when the parity worker is starting, busy or unavailable, and, with a spinner, what a
render-gradient comparison ("compare render gradient") is doing while it runs.
"""
from __future__ import annotations

import math
import time

import numpy as np
from imgui_bundle import imgui, implot

from app.claims.thresholds import PIXEL_MIN_SHARE
from app.ui import colours
from app.ui.gl import Gfx
from app.ui.layout import flow, plot_layout, spinner
from app.ui.parity_summary import HIST_BINS, LOG_RANGE
from app.ui.state import AppState, Command
from engine.image_io import heatmap_colours

MIN_PLOT_HEIGHT = 90.0  # below this the heat map and histogram stop shrinking and the panel scrolls


def draw(state: AppState, gfx: Gfx) -> None:
    view = state.parity
    imgui.text(f"{state.backend or state.arch} (A) vs {state.parity_arch} (B)")
    imgui.same_line()
    imgui.begin_disabled(view.status != "idle")
    if imgui.small_button("compare gradients"):
        state.commands.append(Command("parity_grad"))
    imgui.end_disabled()
    imgui.set_item_tooltip("the fit's gradients are compared every few seconds while it moves; this compares them now")
    imgui.same_line()
    imgui.begin_disabled(view.status.startswith("unavailable") or not state.invert.ready
                         or bool(view.render_grad_stage))
    if imgui.small_button("compare render gradient"):
        state.commands.append(Command("render_grad"))
    imgui.end_disabled()
    imgui.set_item_tooltip("d loss / d scene parameters of the inverse render at its current parameters, on both "
                           "backends, over the pixels whose images agree (as the claim render_grad_parity)")
    imgui.same_line()
    _status_badge(view.status)  # last on the line: its width changes with the status, the buttons' place must not
    if view.render_grad_stage:
        elapsed = f" ({time.perf_counter() - view.render_grad_started:.0f} s)" if state.show_timings else ""
        imgui.text_colored(colours.BUSY, f"{spinner(state)} comparing the render gradient: "
                                         f"{view.render_grad_stage}{elapsed}")
    if view.error:
        imgui.text_colored(colours.ERROR, view.error)
    if view.share_within is None:
        imgui.text_disabled(view.what or "no comparison yet: the first full-quality frame is compared automatically")
        return
    ok = view.share_within >= PIXEL_MIN_SHARE
    colour = colours.OK if ok else colours.ERROR
    imgui.text_colored(colour, f"{view.share_within * 100:.3f} % within {view.atol:g}")
    imgui.set_item_tooltip(view.worst)
    summary = f"max |A - B| {view.max_abs_err:.3g} | {view.what}"
    flow(imgui.calc_text_size(summary).x)
    imgui.text_disabled(summary)
    imgui.set_item_tooltip(view.worst)
    if view.grad_summary:
        imgui.text_wrapped(view.grad_summary)
    if view.render_grad_summary:
        imgui.text_wrapped(view.render_grad_summary)
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing.x
    height = max(avail.y, MIN_PLOT_HEIGHT)
    bar_width = imgui.get_font_size() * 4.5
    _heatmap(state, gfx, imgui.ImVec2(max(avail.x * 0.5 - bar_width - spacing, 16.0), height))
    imgui.same_line()
    _colour_bar(state, imgui.ImVec2(bar_width, height))
    imgui.same_line()
    _histogram(state, imgui.ImVec2(max(imgui.get_content_region_avail().x, 16.0), height))


def _u32(rgb) -> int:
    return imgui.color_convert_float4_to_u32(imgui.ImVec4(float(rgb[0]), float(rgb[1]), float(rgb[2]), 1.0))


def _colour_bar(state: AppState, size: imgui.ImVec2) -> None:
    """The heat map's colour bar, bottom to top over its log range: the ramp, a tick per decade, the tolerance."""
    view = state.parity
    lo, hi = view.heatmap_log_range
    font = imgui.get_font_size()
    origin = imgui.get_cursor_screen_pos()
    imgui.dummy(size)
    top, bottom, width = origin.y + font * 0.5, origin.y + size.y - font * 0.5, font * 0.9

    def y_of(log_value: float) -> float:
        return bottom - (log_value - lo) / (hi - lo) * (bottom - top)

    draw_list = imgui.get_window_draw_list()
    stops = heatmap_colours()
    for k in range(len(stops) - 1):  # one vertical gradient per pair of neighbouring stops
        y0, y1 = (bottom - (k + j) / (len(stops) - 1) * (bottom - top) for j in (1, 0))
        upper, lower = _u32(stops[k + 1]), _u32(stops[k])
        draw_list.add_rect_filled_multi_color(imgui.ImVec2(origin.x, y0), imgui.ImVec2(origin.x + width, y1),
                                              upper, upper, lower, lower)
    text = imgui.get_color_u32(imgui.Col_.text)
    decades = range(math.ceil(lo), math.floor(hi) + 1)
    every = max(1, math.ceil(len(decades) * font * 1.1 / max(bottom - top, 1.0)))  # labels must not overlap
    for decade in list(decades)[::every]:
        y = y_of(decade)
        draw_list.add_line(imgui.ImVec2(origin.x + width, y), imgui.ImVec2(origin.x + width + 3, y), text)
        draw_list.add_text(imgui.ImVec2(origin.x + width + 5, y - font * 0.5), text, f"1e{decade}")
    y = y_of(math.log10(view.atol))
    mark = imgui.get_color_u32(colours.ERROR)
    draw_list.add_line(imgui.ImVec2(origin.x - 2, y), imgui.ImVec2(origin.x + width + 3, y), mark, 2.0)
    if imgui.is_item_hovered():
        imgui.set_tooltip(f"|A - B| per pixel (max over RGB), log scale from {10 ** lo:g} (bottom; exact agreement "
                          f"too) to {10 ** hi:g} (top), the data's range; red line: the tolerance {view.atol:g}")


def _heatmap(state: AppState, gfx: Gfx, size: imgui.ImVec2) -> None:
    view = state.parity
    if view.heatmap is None:
        imgui.dummy(size)
        return
    height, width = view.heatmap.shape[:2]
    scale = min(size.x / width, size.y / height)
    imgui.image(gfx.image("parity_heatmap", view.heatmap, view.heatmap_version),
                imgui.ImVec2(width * scale, height * scale))
    corner = imgui.get_item_rect_min()
    draw_list = imgui.get_window_draw_list()
    radius = imgui.get_font_size() * 0.45
    for row, column, err in reversed(view.worst_pixels):  # ringed, the worst drawn last (on top); red: outside atol
        centre = imgui.ImVec2(corner.x + (column + 0.5) * scale, corner.y + (row + 0.5) * scale)
        ring = colours.ERROR if err > view.atol else imgui.ImVec4(1.0, 1.0, 1.0, 1.0)
        draw_list.add_circle(centre, radius, imgui.get_color_u32(ring), 0, 1.5)
    if imgui.is_item_hovered():
        worst = "; ".join(f"({column}, {row}) {err:.3g}" for row, column, err in view.worst_pixels)
        imgui.set_tooltip(f"|A - B| per pixel (max over RGB), log scale over the data's range (colour bar)\n"
                          f"ringed, worst first, pixel (x, y) |A - B|: {worst or 'none: the frames are identical'}")


def _status_badge(status: str) -> None:
    if status == "idle":
        imgui.text_colored(colours.OK, "[worker idle]")
    elif status == "busy":
        imgui.text_colored(colours.BUSY, "[worker busy: rendering on B]")
    elif status == "starting":
        imgui.text_colored(colours.BUSY, "[worker starting]")
    else:
        imgui.text_colored(colours.ERROR, f"[{status}]")


def _histogram(state: AppState, size: imgui.ImVec2) -> None:
    view = state.parity
    flags, legend, legend_flags = plot_layout(size)
    if view.hist_counts is None or not implot.begin_plot("values by |A - B|###hist", size, flags):
        return
    implot.setup_axes("log10 |A - B|", "values (count, log)")
    implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
    implot.setup_axis_limits(implot.ImAxis_.x1, *LOG_RANGE, implot.Cond_.always)
    # from half a count (a bin of one value shows) to above the tallest bin, at least two decades
    implot.setup_axis_limits(implot.ImAxis_.y1, 0.5, max(float(view.hist_counts.max()) * 3.0, 50.0), implot.Cond_.always)
    implot.setup_legend(legend, legend_flags)
    implot.plot_bars("values", view.hist_log_err, view.hist_counts, (LOG_RANGE[1] - LOG_RANGE[0]) / HIST_BINS)
    implot.plot_inf_lines(f"atol {view.atol:g}", np.array([np.log10(view.atol)]))
    implot.end_plot()
