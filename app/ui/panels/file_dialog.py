"""The file dialog: open or save a file, drawn by ImGui inside the window (so it works under Xvfb too).

One dialog at a time, described by `state.dialog` (`app.ui.state.FileDialog`): what it is for
(a key of `PURPOSES`), the folder shown and the file name typed or picked. The list shows the
folder's sub-folders, then the files with the purpose's extensions and their sizes (folders show
no size). A path typed into the name field (absolute, with ~, or relative to the folder) is taken
as it is; Enter accepts. Accepting queues the purpose's `Command` with the chosen path.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from imgui_bundle import imgui

from app.ui import colours
from app.ui.state import AppState, Command

MESH_EXTENSIONS = (".obj", ".ply", ".stl", ".off", ".glb")


@dataclass(frozen=True)
class Purpose:
    title: str
    extensions: tuple[str, ...]
    save: bool  # a file to write (it may not exist yet) rather than one to open
    command: str  # the Command kind queued with {"path": ...}


PURPOSES = {
    "open_mesh": Purpose("Open a target mesh", MESH_EXTENSIONS, False, "fit_open"),
    "export_mesh": Purpose("Export the fitted mesh (OBJ, PLY, STL or GLB)", (".obj", ".ply", ".stl", ".glb"), True,
                           "fit_export"),
    "save_frame": Purpose("Save the ray-march frame (PNG)", (".png",), True, "save_frame"),
    "save_screenshot": Purpose("Save a screenshot of the window (PNG)", (".png",), True, "save_screenshot"),
}


def open_dialog(state: AppState, purpose: str, path: str = "") -> None:
    """Show the dialog for `purpose`, starting in `path`'s folder (or the working folder) with its name."""
    dialog = state.dialog
    folder, name = os.path.split(os.path.abspath(os.path.expanduser(path))) if path else (os.getcwd(), "")
    dialog.purpose, dialog.folder, dialog.error, dialog.listed = purpose, folder if os.path.isdir(folder) else os.getcwd(), "", ""
    dialog.name = name if PURPOSES[purpose].save else ""


def size_text(n_bytes: int) -> str:
    """A file size as people read it: 512 B, 12.3 KiB, 4.0 MiB."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def list_folder(folder: str, extensions: tuple[str, ...]) -> list[tuple[str, bool, int]]:
    """(name, is folder, size in bytes) of `folder`'s visible sub-folders, then its files with `extensions`."""
    folders, files = [], []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir():
                        folders.append((entry.name, True, 0))
                    elif entry.name.lower().endswith(extensions):
                        files.append((entry.name, False, entry.stat().st_size))
                except OSError:
                    continue  # a broken link or a file that vanished meanwhile
    except OSError:
        return []
    return sorted(folders, key=lambda e: e[0].lower()) + sorted(files, key=lambda e: e[0].lower())


def draw(state: AppState) -> None:
    """The dialog, while `state.dialog.purpose` is set (called once per frame at the top level)."""
    dialog = state.dialog
    if not dialog.purpose:
        return
    purpose = PURPOSES[dialog.purpose]
    title = f"{purpose.title}###file_dialog"
    if not imgui.is_popup_open(title):
        imgui.open_popup(title)
    viewport = imgui.get_main_viewport()
    imgui.set_next_window_size(imgui.ImVec2(min(viewport.work_size.x * 0.9, imgui.get_font_size() * 44),
                                            min(viewport.work_size.y * 0.85, imgui.get_font_size() * 30)),
                               imgui.Cond_.appearing)
    imgui.set_next_window_pos(viewport.get_center(), imgui.Cond_.appearing, imgui.ImVec2(0.5, 0.5))
    opened, keep = imgui.begin_popup_modal(title, True)
    if not opened:
        dialog.purpose = ""
        return
    if dialog.listed != dialog.folder:
        dialog.entries, dialog.listed = list_folder(dialog.folder, purpose.extensions), dialog.folder
    if imgui.button("Up"):
        _enter(dialog, os.path.dirname(dialog.folder))
    imgui.same_line()
    imgui.set_next_item_width(-imgui.FLT_MIN)
    changed, folder = imgui.input_text("##folder", dialog.folder, imgui.InputTextFlags_.enter_returns_true)
    if changed:
        _enter(dialog, os.path.expanduser(folder))
    footer = imgui.get_frame_height_with_spacing() * 2 + imgui.get_style().item_spacing.y
    accepted = _entries(dialog, imgui.ImVec2(0, -footer))
    imgui.text_disabled("files: " + " ".join(f"*{ext}" for ext in purpose.extensions))
    imgui.set_next_item_width(-imgui.get_font_size() * 9)
    entered, dialog.name = imgui.input_text_with_hint("##file_name", "file name or path", dialog.name,
                                                      imgui.InputTextFlags_.enter_returns_true)
    imgui.same_line()
    accepted |= entered | imgui.button("Save" if purpose.save else "Open")
    imgui.same_line()
    if imgui.button("Cancel") or not keep or imgui.is_key_pressed(imgui.Key.escape):
        dialog.purpose = ""
        imgui.close_current_popup()
    elif accepted and dialog.name.strip():
        _accept(state, purpose)
    if dialog.error:
        imgui.text_colored(colours.ERROR, dialog.error)
    imgui.end_popup()


def _entries(dialog, size: imgui.ImVec2) -> bool:
    """The folder's entries as a table; True when a file was double-clicked."""
    flags = imgui.TableFlags_.row_bg | imgui.TableFlags_.scroll_y | imgui.TableFlags_.borders_outer
    if not imgui.begin_table("##entries", 2, flags, size):
        return False
    imgui.table_setup_scroll_freeze(0, 1)
    imgui.table_setup_column("name", imgui.TableColumnFlags_.width_stretch)
    imgui.table_setup_column("size", imgui.TableColumnFlags_.width_fixed, imgui.get_font_size() * 6)
    imgui.table_headers_row()
    chosen, enter = False, None
    for name, is_folder, n_bytes in dialog.entries:
        imgui.table_next_row()
        imgui.table_next_column()
        label = f"{name}/" if is_folder else name
        flags = imgui.SelectableFlags_.span_all_columns | imgui.SelectableFlags_.allow_double_click
        if imgui.selectable(label, not is_folder and name == dialog.name, flags)[0]:
            double = imgui.is_mouse_double_clicked(imgui.MouseButton_.left)
            if is_folder:
                enter = name if double else enter
            else:
                dialog.name, chosen = name, double
        imgui.table_next_column()
        if not is_folder:  # a folder's "size" would be its directory entry's, which means nothing here
            imgui.text_disabled(size_text(n_bytes))
    imgui.end_table()
    if enter is not None:
        _enter(dialog, os.path.join(dialog.folder, enter))
    return chosen


def _enter(dialog, folder: str) -> None:
    folder = os.path.abspath(folder)
    if os.path.isdir(folder):
        dialog.folder, dialog.error = folder, ""
    else:
        dialog.error = f"{folder}: not a folder"


def chosen_path(state: AppState) -> str:
    """The file the dialog's folder and name point to ("" if none yet: a folder was entered, or
    `dialog.error` says why not). Saving, a name without extension gets the purpose's first."""
    dialog = state.dialog
    purpose = PURPOSES[dialog.purpose]
    path = os.path.abspath(os.path.join(dialog.folder, os.path.expanduser(dialog.name.strip())))
    if os.path.isdir(path):
        _enter(dialog, path)
        dialog.name = ""
        return ""
    if not purpose.save and not os.path.isfile(path):
        dialog.error = f"{path}: no such file"
        return ""
    return path + purpose.extensions[0] if purpose.save and not os.path.splitext(path)[1] else path


def _accept(state: AppState, purpose: Purpose) -> None:
    path = chosen_path(state)
    if path:
        state.commands.append(Command(purpose.command, {"path": path}))
        state.dialog.purpose = ""
        imgui.close_current_popup()
