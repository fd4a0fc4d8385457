"""Tape panel: the launches of the fit's last iteration, forward and backward time, as a table and bars.

The bars use a log time axis (one slow launch would hide the others on a linear one); hovering a
bar or a table row shows the launch's full name and times. A line above says what an unprofiled
iteration cost the host (engine.host_costs: launches, and the waits for the device, whose sites a
hover lists), once a running fit has counted one.
"""
from __future__ import annotations

import numpy as np
from imgui_bundle import imgui, implot

from app.ui.gl import Gfx
from app.ui.layout import plot_layout
from app.ui.state import AppState

MIN_MS = 1e-4  # bars start here on the log axis (an untimed launch shows no bar)


def draw(state: AppState, gfx: Gfx) -> None:
    tape = state.tape
    if not tape.names:
        imgui.text_disabled("no iteration taped yet: press Step or Start in the shape fit")
        return
    total = sum(tape.forward_ms) + sum(tape.backward_ms)
    timing = f", {total:.2f} ms" if state.show_timings else ""
    imgui.text(f"iteration {tape.iteration}: {len(tape.names)} launches{timing}")
    if tape.host_iteration >= 0:
        imgui.text(host_line(tape))
        if imgui.is_item_hovered() and tape.host_sync_sites:
            imgui.set_tooltip("the host waits for the device at:\n" + "\n".join(tape.host_sync_sites))
    avail = imgui.get_content_region_avail()
    spacing = imgui.get_style().item_spacing.x
    table = imgui.ImVec2(avail.x * 0.58 - spacing, avail.y)
    _table(state, table)
    imgui.same_line()
    _bars(state, imgui.ImVec2(avail.x - table.x - spacing, avail.y))


def host_line(tape) -> str:
    """What iteration `tape.host_iteration` cost the host, in one line."""
    others = tape.host_launches - tape.host_kernels
    return (f"host costs (iteration {tape.host_iteration}, untimed): {tape.host_launches} launches "
            f"({tape.host_kernels} kernels, {others} Taichi calls), {tape.host_syncs} "
            f"host sync{'s' if tape.host_syncs != 1 else ''}")


def _tooltip(state: AppState, index: int) -> None:
    tape = state.tape
    times = (f"forward {tape.forward_ms[index]:.3f} ms, backward {tape.backward_ms[index]:.3f} ms"
             if state.show_timings else "timings hidden")
    imgui.set_tooltip(f"#{index} {tape.names[index]}\n{times}")


def _table(state: AppState, size: imgui.ImVec2) -> None:
    tape = state.tape
    flags = (imgui.TableFlags_.row_bg | imgui.TableFlags_.borders_inner_v | imgui.TableFlags_.scroll_y
             | imgui.TableFlags_.resizable)
    if not imgui.begin_table("launches", 4, flags, size):
        return
    em = imgui.get_font_size()
    imgui.table_setup_scroll_freeze(0, 1)
    imgui.table_setup_column("#", imgui.TableColumnFlags_.width_fixed)
    imgui.table_setup_column("launch", imgui.TableColumnFlags_.width_stretch)
    imgui.table_setup_column("fwd ms", imgui.TableColumnFlags_.width_fixed, em * 3.5)
    imgui.table_setup_column("bwd ms", imgui.TableColumnFlags_.width_fixed, em * 3.5)
    imgui.table_headers_row()
    for index, name in enumerate(tape.names):
        imgui.table_next_row()
        imgui.table_next_column()
        imgui.text(str(index))
        imgui.table_next_column()
        imgui.text(name)
        if imgui.is_item_hovered():
            _tooltip(state, index)
        for value in (tape.forward_ms[index], tape.backward_ms[index]):
            imgui.table_next_column()
            imgui.text(f"{value:7.3f}" if state.show_timings else "-")
    imgui.end_table()


def _bars(state: AppState, size: imgui.ImVec2) -> None:
    tape = state.tape
    title = "time per launch" if state.show_timings else "time per launch (timings hidden)"
    flags, legend, legend_flags = plot_layout(size)
    if not implot.begin_plot(f"{title}###tape_bars", size, flags):
        return
    count = len(tape.names)
    rows = np.arange(count, dtype=np.float64)
    implot.setup_axes("ms (log)", "launch #", implot.AxisFlags_.none, implot.AxisFlags_.invert)
    implot.setup_axis_scale(implot.ImAxis_.x1, implot.Scale_.log10)
    implot.setup_axis_limits(implot.ImAxis_.y1, -0.6, count - 0.4, implot.Cond_.always)
    every = max(1, int(np.ceil(count * imgui.get_font_size() * 1.2 / max(size.y - 4 * imgui.get_font_size(), 1.0))))
    implot.setup_axis_ticks(implot.ImAxis_.y1, list(rows[::every]), [str(int(row)) for row in rows[::every]])
    implot.setup_legend(legend, legend_flags)
    forward = np.maximum(np.asarray(tape.forward_ms, np.float64), MIN_MS)
    backward = np.maximum(np.asarray(tape.backward_ms, np.float64), MIN_MS)
    if state.show_timings:
        high = max(float(forward.max()), float(backward.max()))
        implot.setup_axis_limits(implot.ImAxis_.x1, MIN_MS, high * 2.0, implot.Cond_.always)
    else:  # golden screenshots: the axes and legend, no bars (their lengths change run to run)
        implot.setup_axis_limits(implot.ImAxis_.x1, 1e-3, 100.0, implot.Cond_.always)
        forward = backward = np.full(count, np.nan)
    horizontal = implot.Spec()
    horizontal.flags = implot.BarsFlags_.horizontal
    implot.plot_bars("forward", forward, 0.4, -0.2, horizontal)
    implot.plot_bars("backward", backward, 0.4, 0.2, horizontal)
    if implot.is_plot_hovered():
        row = int(round(implot.get_plot_mouse_pos().y))
        if 0 <= row < count:
            _tooltip(state, row)
    implot.end_plot()
