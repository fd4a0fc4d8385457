"""Tape panel: the launches of the fit's last iteration, forward and backward time, as a table and bars."""
from __future__ import annotations

import numpy as np
from imgui_bundle import imgui, implot

from app.ui.gl import Gfx
from app.ui.state import AppState


def draw(state: AppState, gfx: Gfx) -> None:
    tape = state.tape
    if not tape.names:
        imgui.text_disabled("no iteration taped yet: press Step or Start in the shape fit")
        return
    total = sum(tape.forward_ms) + sum(tape.backward_ms)
    timing = f", {total:.2f} ms" if state.show_timings else ""
    imgui.text(f"iteration {tape.iteration}: {len(tape.names)} launches{timing}")
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing.x
    table = imgui.ImVec2(avail.x * 0.55 - spacing, avail.y)
    _table(state, table)
    imgui.same_line()
    _bars(state, imgui.ImVec2(avail.x - table.x - spacing, avail.y))


def _table(state: AppState, size: imgui.ImVec2) -> None:
    tape = state.tape
    flags = imgui.TableFlags_.row_bg | imgui.TableFlags_.borders_inner_v | imgui.TableFlags_.scroll_y
    if not imgui.begin_table("launches", 4, flags, size):
        return
    imgui.table_setup_scroll_freeze(0, 1)
    imgui.table_setup_column("#", imgui.TableColumnFlags_.width_fixed)
    imgui.table_setup_column("launch", imgui.TableColumnFlags_.width_stretch)
    imgui.table_setup_column("fwd ms", imgui.TableColumnFlags_.width_fixed, imgui.get_font_size() * 3.5)
    imgui.table_setup_column("bwd ms", imgui.TableColumnFlags_.width_fixed, imgui.get_font_size() * 3.5)
    imgui.table_headers_row()
    for index, name in enumerate(tape.names):
        imgui.table_next_row()
        imgui.table_next_column()
        imgui.text(str(index))
        imgui.table_next_column()
        imgui.text(name)
        for value in (tape.forward_ms[index], tape.backward_ms[index]):
            imgui.table_next_column()
            imgui.text(f"{value:7.3f}" if state.show_timings else "-")
    imgui.end_table()


def _bars(state: AppState, size: imgui.ImVec2) -> None:
    tape = state.tape
    if not state.show_timings:
        imgui.text_disabled("(timings hidden for screenshots)")
        return
    if not implot.begin_plot("forward / backward ms", size):
        return
    count = len(tape.names)
    rows = np.arange(count, dtype=np.float64)
    implot.setup_axes("ms", "launch #", implot.AxisFlags_.auto_fit, implot.AxisFlags_.invert)
    implot.setup_axis_limits(implot.ImAxis_.y1, -0.6, count - 0.4, implot.Cond_.always)
    implot.setup_axis_ticks(implot.ImAxis_.y1, list(rows), [str(index) for index in range(count)])
    implot.setup_legend(implot.Location_.south_east)
    horizontal = implot.Spec()
    horizontal.flags = implot.BarsFlags_.horizontal
    implot.plot_bars("forward", np.asarray(tape.forward_ms, np.float64), 0.4, -0.2, horizontal)
    implot.plot_bars("backward", np.asarray(tape.backward_ms, np.float64), 0.4, 0.2, horizontal)
    implot.end_plot()
