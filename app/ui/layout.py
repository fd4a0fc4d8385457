"""Layout helpers the panels share, so that they hold together from 1024x640 up.

`flow(width)` places the next item beside the last one when it fits there and on a new line
otherwise, so a row of controls wraps instead of running off a narrow panel. `plot_layout(size)`
gives a short plot its room back: no title (its axes stay labelled) and the legend inside.
`readable_sliders()` (once, after start-up) gives every slider a thin, translucent handle.
"""
from __future__ import annotations

from imgui_bundle import imgui, implot

COMPACT_PLOT_LINES = 14  # plots shorter than this many text lines drop their title
SPINNER = "|/-\\"
SPINNER_FRAMES = 6  # frames per spinner character
SLIDER_GRAB_PX = 4.0  # a slider handle's least width (ImGui's default, 12 px at this scale, hid a narrow slider's digits)
SLIDER_GRAB_ALPHA = 0.45  # the handle's opacity: ImGui draws the value over the handle, and must be read through it


def flow(width: float) -> None:
    """Before an item `width` pixels wide: beside the previous item if it fits, else on the next line."""
    imgui.same_line()
    if imgui.get_content_region_avail().x < width:
        imgui.new_line()


def readable_sliders() -> None:
    """Every slider's value readable wherever its handle is: a thin, translucent handle under the value's text.
    (An integer slider's handle is its width over the number of values, so subdiv's stays wide: translucent.)
    The least size also applies to a scrollbar's handle, which only gets that short on a page of ~100 screens."""
    style = imgui.get_style()
    style.grab_min_size = SLIDER_GRAB_PX
    for colour in (imgui.Col_.slider_grab, imgui.Col_.slider_grab_active):
        rgba = style.color_(colour)
        style.set_color_(colour, imgui.ImVec4(rgba.x, rgba.y, rgba.z, SLIDER_GRAB_ALPHA))


def spinner(state) -> str:
    """The spinner's character at this frame of `state` (an AppState): work under way, however long."""
    return SPINNER[(state.frame // SPINNER_FRAMES) % len(SPINNER)]


def labelled_width(item_width: float, label: str) -> float:
    """The width of a widget of `item_width` pixels with `label` drawn to its right."""
    return item_width + imgui.get_style().item_inner_spacing.x + imgui.calc_text_size(label.split("##")[0]).x


def plot_layout(size: imgui.ImVec2) -> tuple[int, int, int]:
    """(plot flags, legend location, legend flags) for a plot of `size`: a tall one has its title and a
    legend in a row above it; a short one has neither the title nor that row (the legend goes inside)."""
    if size.y < COMPACT_PLOT_LINES * imgui.get_font_size():
        return implot.Flags_.no_title, implot.Location_.north_east, implot.LegendFlags_.none
    return implot.Flags_.none, implot.Location_.north, implot.LegendFlags_.outside | implot.LegendFlags_.horizontal
