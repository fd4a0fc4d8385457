"""The menu bar's File, View and Help menus, the keyboard shortcuts, and the shortcuts window.

`SHORTCUTS` is the one list of what a key does: the menus show each action's key, the Help
menu's window lists them all, and `handle_shortcuts` runs them. Every action works on the
`AppState` the way the matching button does (the panels' own functions), so a key and a click
can never disagree. Keys are global (they work whichever panel has focus) except while a text
field is being edited, which keeps its keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from imgui_bundle import imgui

from app.ui.panels import file_dialog, raymarch_panel as raymarch, fit_panel as shape_fit
from app.ui.state import UI_SCALES, AppState
from app.version import version

UI_SCALE_STEP = 0.1


@dataclass(frozen=True)
class Shortcut:
    key: int  # an imgui key chord
    keys: str  # as shown to the user
    label: str
    action: Callable[[AppState], None]


def _scale_by(step: float) -> Callable[[AppState], None]:
    def action(state: AppState) -> None:
        state.ui_scale = min(max(round(state.ui_scale + step, 2), UI_SCALES[0]), UI_SCALES[1])
    return action


def _dialog(purpose: str, path: Callable[[AppState], str] = lambda state: "") -> Callable[[AppState], None]:
    return lambda state: file_dialog.open_dialog(state, purpose, path(state))


def _reset_views(state: AppState) -> None:
    raymarch.reset_view(state)
    shape_fit.reset_view(state)


def _quit(state: AppState) -> None:
    state.quit_requested = True


def _toggle_shortcuts(state: AppState) -> None:
    state.show_shortcuts = not state.show_shortcuts


_KEY, _CTRL, _SHIFT = imgui.Key, imgui.Key.mod_ctrl, imgui.Key.mod_shift
SHORTCUTS: dict[str, Shortcut] = {
    "open_mesh": Shortcut(_CTRL | _KEY.o, "Ctrl+O", "Open a target mesh...", _dialog("open_mesh")),
    "export_mesh": Shortcut(_CTRL | _KEY.e, "Ctrl+E", "Export the fitted mesh...",
                            _dialog("export_mesh", lambda state: state.fit.export_path)),
    "save_frame": Shortcut(_CTRL | _KEY.s, "Ctrl+S", "Save the ray-march frame...",
                           _dialog("save_frame", lambda state: "out/frame.png")),
    "save_screenshot": Shortcut(_KEY.f12, "F12", "Save a screenshot of the window...",
                                _dialog("save_screenshot", lambda state: "out/screenshot.png")),
    "quit": Shortcut(_CTRL | _KEY.q, "Ctrl+Q", "Quit", _quit),
    "play": Shortcut(_KEY.space, "Space", "Play / pause the timeline", raymarch.toggle_play),
    "fit_run": Shortcut(_KEY.f5, "F5", "Start / pause the fit", shape_fit.toggle_run),
    "fit_step": Shortcut(_KEY.f6, "F6", "One fit iteration", shape_fit.step),
    "fit_reset": Shortcut(_CTRL | _KEY.r, "Ctrl+R", "Reset the fit", shape_fit.reset),
    "reset_views": Shortcut(_KEY.home, "Home", "Reset both views (orbit, zoom, pan)", _reset_views),
    "scale_up": Shortcut(_CTRL | _KEY.equal, "Ctrl+=", "Larger UI", _scale_by(UI_SCALE_STEP)),
    "scale_down": Shortcut(_CTRL | _KEY.minus, "Ctrl+-", "Smaller UI", _scale_by(-UI_SCALE_STEP)),
    "scale_reset": Shortcut(_CTRL | _KEY._0, "Ctrl+0", "Default UI size", lambda state: setattr(state, "ui_scale", 1.0)),
    "shortcuts": Shortcut(_KEY.f1, "F1", "Keyboard shortcuts", _toggle_shortcuts),
}
MOUSE = (  # what the mouse does in the two views, listed with the keys
    ("drag (left button)", "orbit the ray-march or fit view"),
    ("drag (right or middle button)", "pan the view"),
    ("wheel", "zoom"),
)


def handle_shortcuts(state: AppState) -> None:
    """Run the action of every shortcut pressed this frame (call once per frame, at the top level)."""
    if state.dialog.purpose:
        return  # the file dialog has the keyboard
    for shortcut in SHORTCUTS.values():
        if imgui.shortcut(shortcut.key, imgui.InputFlags_.route_global):
            shortcut.action(state)


def _item(state: AppState, name: str, enabled: bool = True) -> None:
    shortcut = SHORTCUTS[name]
    if imgui.menu_item(shortcut.label, shortcut.keys, False, enabled)[0]:
        shortcut.action(state)


def draw_menus(state: AppState, panels: Sequence = (), restore_layout: Callable[[], None] = lambda: None) -> None:
    """File, View and Help. `panels`: the docked windows (`.label`, `.is_visible`) the View menu shows or hides;
    `restore_layout` puts them back in the default layout."""
    if imgui.begin_menu("File"):
        _item(state, "open_mesh")
        _item(state, "export_mesh", state.fit.ready)
        imgui.separator()
        _item(state, "save_frame", state.raymarch.image is not None)
        _item(state, "save_screenshot")
        imgui.separator()
        _item(state, "quit")
        imgui.end_menu()
    if imgui.begin_menu("View"):
        for panel in panels:
            panel.is_visible = imgui.menu_item(panel.label, "", panel.is_visible)[1]
        if imgui.menu_item_simple("Restore the default layout"):
            restore_layout()
        imgui.separator()
        imgui.set_next_item_width(imgui.get_font_size() * 8)
        _, scale = imgui.slider_float("UI scale", state.ui_scale, *UI_SCALES, "%.1fx")
        state.ui_scale = round(scale, 2)
        for name in ("scale_up", "scale_down", "scale_reset", "reset_views"):
            _item(state, name)
        imgui.end_menu()
    if imgui.begin_menu("Help"):
        _item(state, "shortcuts")
        imgui.separator()
        imgui.text_disabled(f"shannon-autograd {version()}")
        imgui.end_menu()


def draw_shortcuts_window(state: AppState) -> None:
    """Help > Keyboard shortcuts: every key and mouse action, in one table."""
    if not state.show_shortcuts:
        return
    imgui.set_next_window_size(imgui.ImVec2(imgui.get_font_size() * 30, 0), imgui.Cond_.appearing)
    flags = imgui.WindowFlags_.no_docking | imgui.WindowFlags_.always_auto_resize
    visible, state.show_shortcuts = imgui.begin("Keyboard shortcuts", state.show_shortcuts, flags)
    if visible and imgui.begin_table("##keys", 2, imgui.TableFlags_.row_bg | imgui.TableFlags_.borders_inner_v):
        imgui.table_setup_column("keys", imgui.TableColumnFlags_.width_fixed)
        imgui.table_setup_column("does", imgui.TableColumnFlags_.width_stretch)
        imgui.table_headers_row()
        rows = [(shortcut.keys, shortcut.label) for shortcut in SHORTCUTS.values()] + list(MOUSE)
        for keys, label in rows:
            imgui.table_next_row()
            imgui.table_next_column()
            imgui.text(keys)
            imgui.table_next_column()
            imgui.text(label)
        imgui.end_table()
    imgui.end()
