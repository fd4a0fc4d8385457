"""The run controls the shape-fit and inverse-render panels share: Start/Pause, Step, Reset and the caption under them.

`run_buttons` draws the row and says which button was pressed; each panel decides what a press
does to its own state. `run_caption` writes the line of progress under it: setting up, waiting
for the backend, or the iteration with whatever details the panel adds.

    >>> run_caption(False, True, "the fit", "waiting", "iteration 3", "loss 1.0e-01", "", "wrote fit.obj")
    'iteration 3 | loss 1.0e-01 | wrote fit.obj'
    >>> run_caption(True, False, "the fit", "waiting", "iteration 0")
    'setting up the fit...'
"""
from __future__ import annotations

from imgui_bundle import imgui


def run_buttons(running: bool, done: bool, width: float, id_suffix: str = "", continue_tip: str = "") -> str:
    """Start/Pause, Step and Reset in one row, each `width` pixels wide; which was pressed: "run", "step",
    "reset", or "" for none.

    Once `done` (the run reached its last iteration), Start becomes Continue with `continue_tip` as its
    tooltip, or is disabled when there is no `continue_tip`. `id_suffix` (e.g. "##invert") keeps the
    buttons' ids apart from another panel's."""
    pressed = ""
    stopped_at_end = done and not running
    imgui.begin_disabled(stopped_at_end and not continue_tip)
    label = "Pause" if running else ("Continue" if stopped_at_end and continue_tip else "Start")
    if imgui.button(label + id_suffix, imgui.ImVec2(width, 0)):
        pressed = "run"
    imgui.end_disabled()
    if stopped_at_end and continue_tip:
        imgui.set_item_tooltip(continue_tip)
    for name in ("Step", "Reset"):
        imgui.same_line()
        if imgui.button(name + id_suffix, imgui.ImVec2(width, 0)):
            pressed = name.lower()
    return pressed


def run_caption(busy: bool, ready: bool, what: str, waiting: str, iteration: str, *details: str) -> str:
    """"setting up `what`..." while `busy`, `waiting` until `ready`, then `iteration` and the non-empty
    `details`, joined by " | "."""
    if busy:
        return f"setting up {what}..."
    if not ready:
        return waiting
    return " | ".join([iteration, *(detail for detail in details if detail)])
