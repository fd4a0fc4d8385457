"""A window for one result, a picture or a few curves: what the examples (examples/) open unless --headless.

    show_image("render_frame", rgb8)                               # (H, W, 3) uint8 sRGB
    show_curves("tape_basics", x, {"dL/dx": grad, "2 cos(2x + 0.5)": expected})

Each call blocks until the window is closed (or, with `frames=N`, for N frames: the tests),
and returns the last frame as (H, W, 4) uint8 RGBA. Without a display: one `UserError`,
"no display: use --headless or run under Xvfb". imgui is imported only when a window opens.
"""
from __future__ import annotations

import numpy as np

from app.ui.app import require_display


def _run(title: str, gui, size: tuple[int, int], frames: int | None, implot: bool = False) -> np.ndarray:
    require_display()
    from imgui_bundle import hello_imgui, immapp

    drawn = [0]

    def frame() -> None:
        gui()
        drawn[0] += 1
        if frames is not None and drawn[0] >= frames:
            hello_imgui.get_runner_params().app_shall_exit = True

    params = hello_imgui.RunnerParams()
    params.app_window_params.window_title = title
    params.app_window_params.window_geometry.size = size
    # no multisampling, as in the app: llvmpipe resolves it on the CPU, and GLFW keeps a window hint set
    # once for every later window of the process (the app's own window included)
    params.renderer_backend_options.open_gl_options.anti_aliasing_samples = 0
    params.fps_idling.fps_idle = 10.0
    params.ini_disable = True  # a viewer keeps no layout: HelloImGui would write <title>.ini into the working directory
    params.callbacks.show_gui = frame
    immapp.run(params, immapp.AddOnsParams(with_implot=implot))
    return np.asarray(hello_imgui.final_app_window_screenshot())


def show_image(title: str, image: np.ndarray, frames: int | None = None) -> np.ndarray:
    """Show `image`, (H, W, 3) uint8 sRGB, at its own size in a window titled `title`."""
    from imgui_bundle import immvision

    image = np.ascontiguousarray(image, dtype=np.uint8)
    immvision.use_rgb_color_order()
    params = immvision.ImageParams()
    params.image_display_size = (image.shape[1], image.shape[0])
    params.show_options_button = params.show_image_info = params.show_pixel_info = params.show_zoom_buttons = False
    params.refresh_image = False
    return _run(title, lambda: immvision.image("##image", image, params), (image.shape[1] + 16, image.shape[0] + 16),
                frames)


def show_curves(title: str, x: np.ndarray, curves: dict[str, np.ndarray], log_y: bool = False,
                frames: int | None = None) -> np.ndarray:
    """Plot each of `curves` ({label: (N,) values}) against `x` (N,), optionally on a log-scale y axis."""
    from imgui_bundle import imgui, implot

    x = np.ascontiguousarray(x, dtype=np.float64)
    curves = {label: np.ascontiguousarray(y, dtype=np.float64) for label, y in curves.items()}

    def gui() -> None:
        if implot.begin_plot(title, imgui.ImVec2(-1, -1)):
            implot.setup_axes("", "", implot.AxisFlags_.auto_fit, implot.AxisFlags_.auto_fit)
            if log_y:
                implot.setup_axis_scale(implot.ImAxis_.y1, implot.Scale_.log10)
            for label, y in curves.items():
                implot.plot_line(label, x, y)
            implot.end_plot()

    return _run(title, gui, (800, 500), frames, implot=True)
