"""Ray-march panel: the robot-arm frame as a texture; orbit, pan and zoom with the mouse; a timeline.

Draws `state.raymarch` and writes the user's edits back (camera, timeline, play,
resolution). Reports the image area it has (`view_px`) so the controller renders
frames at the panel's size, every pixel by default once the view is still; marks
`interacting_until` while the user drags, zooms or scrubs so that frames meanwhile
render at preview quality. Left drag orbits, right or middle drag pans, the wheel
zooms, "Reset view" (or Home) goes back to the start-up camera.
"""
from __future__ import annotations

import time
from dataclasses import replace

from imgui_bundle import imgui

from app.ui import colours
from app.ui.gl import Gfx
from app.ui.layout import flow
from app.ui.state import RAYMARCH_HOME, AppState

DRAG_DEG_PER_PX = 0.4
ZOOM_PER_WHEEL = 0.9  # distance factor per wheel notch
DISTANCE_RANGE = (2.0, 14.0)
PITCH_RANGE = (-5.0, 85.0)
PREVIEW_HOLD_S = 0.25  # keep preview quality this long after the last edit
FOV_Y_DEG = 36.0  # engine.render.Camera's field of view: pans follow the mouse at this angle


def toggle_play(state: AppState) -> None:
    state.raymarch.playing = not state.raymarch.playing


def reset_view(state: AppState) -> None:
    state.raymarch.orbit = replace(RAYMARCH_HOME)


def draw(state: AppState, gfx: Gfx) -> None:
    view = state.raymarch
    edited = False
    if imgui.button("Pause" if view.playing else "Play", imgui.ImVec2(imgui.get_font_size() * 4, 0)):
        toggle_play(state)
    imgui.same_line()
    imgui.set_next_item_width(imgui.get_font_size() * 5)
    _, view.speed = imgui.slider_float("speed", view.speed, 0.1, 4.0, "%.1fx")
    imgui.same_line()
    imgui.set_next_item_width(-imgui.FLT_MIN)
    changed, view.t = imgui.slider_float("##timeline", view.t, 0.0, 1.0, "t = %.3f")
    edited |= changed
    imgui.set_next_item_width(imgui.get_font_size() * 6)
    _, view.res_scale = imgui.slider_float("resolution", view.res_scale, 0.1, 1.0, "%.2f")
    imgui.set_item_tooltip("share of the panel's pixels rendered once the view is still (1.00: every pixel); "
                           "previews while you drag or play render at a quarter")
    flow(imgui.calc_text_size("Reset view").x + imgui.get_style().frame_padding.x * 2)
    if imgui.button("Reset view"):
        reset_view(state)
        edited = True
    caption = _frame_caption(state)
    flow(imgui.calc_text_size(caption).x)
    imgui.text_disabled(caption)
    if view.error:
        imgui.text_colored(colours.ERROR, f"frame failed: {view.error}")
    edited |= _image(state, gfx)
    if edited or view.playing:
        view.interacting_until = time.perf_counter() + PREVIEW_HOLD_S


def _frame_caption(state: AppState) -> str:
    view = state.raymarch
    backend = state.backend or state.arch
    if view.image is None:
        return f"{backend}: waiting for the first frame"
    height, width = view.image.shape[:2]
    quality = "full" if view.image_is_full else "preview"
    timing = f" | {view.timing()}" if state.show_timings else ""
    return f"{backend} | {width}x{height} {quality}{timing}"


def _image(state: AppState, gfx: Gfx) -> bool:
    """The frame, filling the rest of the panel, with orbit/pan/zoom input. True if the camera moved."""
    view = state.raymarch
    avail = imgui.get_content_region_avail()
    size = imgui.ImVec2(max(avail.x, 16.0), max(avail.y, 16.0))
    view.view_px = (int(size.x), int(size.y))
    origin = imgui.get_cursor_screen_pos()
    imgui.invisible_button("##raymarch_view", size, imgui.ButtonFlags_.mouse_button_left
                           | imgui.ButtonFlags_.mouse_button_right | imgui.ButtonFlags_.mouse_button_middle)
    active, hovered = imgui.is_item_active(), imgui.is_item_hovered()
    draw_list = imgui.get_window_draw_list()
    corner = imgui.ImVec2(origin.x + size.x, origin.y + size.y)
    if view.image is not None:
        draw_list.add_image(gfx.image("raymarch", view.image, view.image_version), origin, corner)
    else:
        draw_list.add_rect_filled(origin, corner, imgui.get_color_u32(imgui.Col_.frame_bg))
        draw_list.add_text(imgui.ImVec2(origin.x + 12, origin.y + 12), imgui.get_color_u32(imgui.Col_.text),
                           f"rendering the first frame (waiting on: {state.compiling or 'the backend'})...")
    moved = False
    delta = imgui.get_io().mouse_delta
    if active and imgui.is_mouse_dragging(imgui.MouseButton_.left, 0.0):
        view.orbit.yaw = (view.orbit.yaw - delta.x * DRAG_DEG_PER_PX) % 360.0
        view.orbit.pitch = min(max(view.orbit.pitch + delta.y * DRAG_DEG_PER_PX, PITCH_RANGE[0]), PITCH_RANGE[1])
        moved = delta.x != 0.0 or delta.y != 0.0
    elif active and (imgui.is_mouse_dragging(imgui.MouseButton_.right, 0.0)
                     or imgui.is_mouse_dragging(imgui.MouseButton_.middle, 0.0)):
        view.orbit.pan(delta.x, delta.y, FOV_Y_DEG, size.y)
        moved = delta.x != 0.0 or delta.y != 0.0
    wheel = imgui.get_io().mouse_wheel
    if hovered and wheel != 0.0:
        distance = view.orbit.distance * ZOOM_PER_WHEEL ** wheel
        view.orbit.distance = min(max(distance, DISTANCE_RANGE[0]), DISTANCE_RANGE[1])
        moved = True
    return moved
