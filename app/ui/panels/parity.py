"""Parity panel: the live difference between the primary and the parity backend.

The controller renders the frame on screen again on the parity backend (its own
worker process) and `summarise` compares the two off the UI thread; this panel draws
the result: |A - B| as a heat map (`engine.image_io.diff_heatmap`: log scale around
the tolerance), the share of values within the tolerance, the max error and where it
is, and a histogram of log10 |A - B| over every value.
It says when the parity worker is starting, busy or unavailable.
"""
from __future__ import annotations

import numpy as np
from imgui_bundle import imgui, implot

from app.ui.gl import Gfx
from app.ui.state import AppState, Command
from engine.image_io import diff_heatmap
from engine.parity import abs_error, compare

LOG_RANGE = (-9.0, 0.0)  # the histogram spans 1e-9 .. 1 (exact agreement lands in the first bin)
HIST_BINS = 36


def summarise(a: np.ndarray, b: np.ndarray, atol: float) -> dict:
    """Everything the panel shows about A vs B (run off the UI thread: it touches every value)."""
    report = compare(a, b, atol)
    err = abs_error(a, b)
    with np.errstate(divide="ignore"):
        log_err = np.clip(np.log10(err), *LOG_RANGE)
    counts, edges = np.histogram(log_err, bins=HIST_BINS, range=LOG_RANGE)
    return {"report": report, "heatmap": diff_heatmap(a, b, atol), "hist_counts": counts.astype(np.float64),
            "hist_log_err": 0.5 * (edges[:-1] + edges[1:])}


def draw(state: AppState, gfx: Gfx) -> None:
    view = state.parity
    imgui.text(f"{state.backend or state.arch} (A) vs {state.parity_arch} (B)")
    imgui.same_line()
    _status_badge(view.status)
    imgui.same_line()
    imgui.begin_disabled(view.status != "idle")
    if imgui.small_button("compare gradients"):
        state.commands.append(Command("parity_grad"))
    imgui.end_disabled()
    imgui.set_item_tooltip("the fit's gradients are compared every few seconds while it moves; this compares them now")
    imgui.same_line()
    imgui.begin_disabled(view.status != "idle" or not state.invert.ready)
    if imgui.small_button("compare render gradient"):
        state.commands.append(Command("render_grad"))
    imgui.end_disabled()
    imgui.set_item_tooltip("d loss / d scene parameters of the inverse render at its current parameters, on both "
                           "backends")
    if view.error:
        imgui.text_colored(imgui.ImVec4(1.0, 0.45, 0.35, 1.0), view.error)
    if view.share_within is None:
        imgui.text_disabled(view.what or "no comparison yet: the first full-quality frame is compared automatically")
        return
    imgui.text(view.what)
    avail = imgui.get_content_region_avail()
    left = imgui.ImVec2(avail.x * 0.5, avail.y)
    if view.heatmap is not None:
        height, width = view.heatmap.shape[:2]
        scale = min(left.x / width, left.y / height)
        imgui.image(gfx.image("parity_heatmap", view.heatmap, view.heatmap_version),
                    imgui.ImVec2(width * scale, height * scale))
        if imgui.is_item_hovered():
            imgui.set_tooltip(f"|A - B| per pixel (max over RGB), log scale from {view.atol / 100:g} (dark) "
                              f"to {view.atol * 1000:g} (bright); within atol is the dark half")
    imgui.same_line()
    imgui.begin_group()
    ok = view.share_within >= 0.9995
    colour = imgui.ImVec4(0.4, 0.9, 0.4, 1.0) if ok else imgui.ImVec4(1.0, 0.45, 0.35, 1.0)
    imgui.text_colored(colour, f"{view.share_within * 100:.3f} % within {view.atol:g}")
    imgui.text(f"max |A - B| {view.max_abs_err:.3g}")
    imgui.text_disabled(view.worst)
    if view.grad_summary:
        imgui.text_wrapped(view.grad_summary)
    if view.render_grad_summary:
        imgui.text_wrapped(view.render_grad_summary)
    _histogram(state, imgui.get_content_region_avail())
    imgui.end_group()


def _status_badge(status: str) -> None:
    if status == "idle":
        imgui.text_colored(imgui.ImVec4(0.4, 0.9, 0.4, 1.0), "[worker idle]")
    elif status == "busy":
        imgui.text_colored(imgui.ImVec4(1.0, 0.8, 0.3, 1.0), "[worker busy: rendering on B]")
    elif status == "starting":
        imgui.text_colored(imgui.ImVec4(1.0, 0.8, 0.3, 1.0), "[worker starting]")
    else:
        imgui.text_colored(imgui.ImVec4(1.0, 0.45, 0.35, 1.0), f"[{status}]")


def _histogram(state: AppState, size: imgui.ImVec2) -> None:
    view = state.parity
    plot_size = imgui.ImVec2(size.x, max(size.y, 60.0))
    if view.hist_counts is None or not implot.begin_plot("log10 |A - B|", plot_size, implot.Flags_.no_legend):
        return
    implot.setup_axes("", "values", implot.AxisFlags_.none, implot.AxisFlags_.auto_fit)
    implot.setup_axis_limits(implot.ImAxis_.x1, *LOG_RANGE, implot.Cond_.always)
    implot.plot_bars("values", view.hist_log_err, view.hist_counts, (LOG_RANGE[1] - LOG_RANGE[0]) / HIST_BINS)
    implot.tag_x(np.log10(view.atol), imgui.ImVec4(0.4, 0.9, 0.4, 1.0), "atol")
    implot.end_plot()
