"""Status bar (backend, Taichi version, start-up progress, the last file saved, UI rate) and the errors window."""
from __future__ import annotations

from imgui_bundle import imgui

from app.ui import colours
from app.ui.layout import spinner
from app.ui.state import AppState


def draw_status(state: AppState) -> None:
    backend = state.backend or f"{state.arch} (starting)"
    imgui.text(f"backend: {backend}")
    if state.backend_note:
        imgui.set_item_tooltip(state.backend_note)
    imgui.same_line()
    imgui.text_disabled(f"| parity: {state.parity_arch} | Taichi {state.taichi_version} | GL {state.gl_renderer.split(' (')[0]}")
    imgui.same_line()
    if state.warmup:
        if state.warmup_total and state.warmup_done < state.warmup_total:
            imgui.text_disabled("|")
            imgui.same_line()
            fraction = state.warmup_done / state.warmup_total
            imgui.progress_bar(fraction, imgui.ImVec2(imgui.get_font_size() * 7, 0),
                               f"start-up {state.warmup_done}/{state.warmup_total}")
            imgui.set_item_tooltip("backend starts and first kernel compiles; the first run on a machine compiles "
                                   "for minutes, later runs load the kernels from Taichi's cache")
            imgui.same_line()
        imgui.text_colored(colours.BUSY, f"{spinner(state)} {'; '.join(state.warmup)}")
    else:
        imgui.text_disabled("| warm")
    if state.saved:
        imgui.same_line()
        imgui.text_disabled(f"| {state.saved}")
    if state.errors:
        imgui.same_line()
        imgui.text_colored(colours.ERROR, f"| {len(state.errors)} error(s)")
    if state.show_timings:
        imgui.same_line()
        imgui.text_disabled(f"| UI {state.ui_fps:.0f} fps")


def draw_errors(state: AppState) -> None:
    """A window listing the errors (bad mesh file, worker failure, ...) until dismissed."""
    if not state.errors:
        return
    viewport = imgui.get_main_viewport()
    imgui.set_next_window_pos(imgui.ImVec2(viewport.work_pos.x + viewport.work_size.x * 0.5, viewport.work_pos.y + 40),
                              imgui.Cond_.appearing, imgui.ImVec2(0.5, 0.0))
    imgui.set_next_window_size_constraints(imgui.ImVec2(360, 0), imgui.ImVec2(900, 400))
    flags = imgui.WindowFlags_.always_auto_resize | imgui.WindowFlags_.no_collapse | imgui.WindowFlags_.no_docking
    if imgui.begin("Errors", None, flags):
        for index, message in enumerate(list(state.errors)):
            imgui.push_id(index)
            imgui.text_colored(colours.ERROR, "error:")
            imgui.same_line()
            imgui.push_text_wrap_pos(imgui.get_font_size() * 45)
            imgui.text_wrapped(message)
            imgui.pop_text_wrap_pos()
            imgui.pop_id()
        if imgui.button("Dismiss"):
            state.errors.clear()
    imgui.end()
