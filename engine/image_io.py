"""Image output: sRGB encoding, PNG / float (npy, EXR) / GIF / MP4 writing, false-colour maps. All writes are atomic.

Used by the renderer's CLI, the parity claim and the GUI. Inputs are numpy arrays:
linear RGB in [0, 1] (H, W, 3) float32, or scalar maps (H, W). PNGs can carry text
chunks (`tEXt`), which is where an 8-bit AOV says what range of values it encodes and a
frame says who drew it (`png_edges_text`, read back by `png_edges`).
"""
from __future__ import annotations

import io
import os
from typing import Sequence

import numpy as np
from PIL import Image, PngImagePlugin

from engine import atomic


def srgb8(linear: np.ndarray) -> np.ndarray:
    """Linear RGB in [0, 1] -> sRGB-encoded uint8 (the exact piecewise sRGB curve)."""
    x = np.clip(np.nan_to_num(np.asarray(linear, np.float32), nan=0.0), 0.0, 1.0)
    encoded = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1.0 / 2.4) - 0.055)
    return (encoded * 255.0 + 0.5).astype(np.uint8)


def linear_from_srgb8(pixels: np.ndarray) -> np.ndarray:
    """sRGB-encoded uint8 -> linear RGB in [0, 1] float32 (the inverse of `srgb8`, up to its rounding)."""
    x = np.asarray(pixels, np.float64) / 255.0
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4).astype(np.float32)


def read_png_rgb(path: str | os.PathLike) -> np.ndarray:
    """An image file as uint8 RGB (H, W, 3); OSError or ValueError when it is not a readable image."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def read_png_text(path: str | os.PathLike) -> dict[str, str]:
    """A PNG's text chunks (key -> value); empty for an image without any (or not a PNG)."""
    with Image.open(path) as image:
        return dict(getattr(image, "text", None) or {})


EDGE_KINDS = ("hard", "soft")  # who drew a frame: the forward ray marcher, or the differentiable render
EDGES_KEY = "shannon-autograd edges"  # the PNG text chunk naming who drew the frame (`png_edges` reads it)
EDGE_TEXT = {"hard": "hard: the forward ray marcher, point-sampled silhouettes",
             "soft": "soft: the differentiable render, silhouettes antialiased by its soft coverage"}


def png_edges_text(edges: str) -> dict[str, str]:
    """A frame PNG's text chunks (`write_png(..., text=)`): who drew it, one of EDGE_KINDS (`png_edges` reads it)."""
    return {EDGES_KEY: EDGE_TEXT[edges], "Software": "shannon-autograd"}


def png_edges(path: str | os.PathLike) -> str | None:
    """`hard` or `soft`: who drew a frame PNG (`render --edges`), from its text chunk; None if it has none."""
    value = read_png_text(path).get(EDGES_KEY, "")
    return next((kind for kind in EDGE_KINDS if value.startswith(kind + ":")), None)


def _png_bytes(pixels: np.ndarray, text: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    info = None
    if text:
        info = PngImagePlugin.PngInfo()
        for key, value in text.items():
            info.add_text(key, value)
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=4, pnginfo=info)
    return buffer.getvalue()


def write_png(path: str | os.PathLike, pixels: np.ndarray, text: dict[str, str] | None = None) -> None:
    """Write uint8 pixels (H, W) or (H, W, 3) as a PNG, with `text` as tEXt chunks (key -> value)."""
    atomic.write_bytes(path, _png_bytes(np.ascontiguousarray(pixels, np.uint8), text))


def write_linear_png(path: str | os.PathLike, linear: np.ndarray) -> None:
    write_png(path, srgb8(linear))


def write_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with atomic.atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


FLOAT_FORMATS = ("npy", "exr")


def write_float(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write a float32 map, (H, W) or (H, W, 3), as `.npy` or as an OpenEXR file (`.exr`: channel Z, or RGB)."""
    array = np.ascontiguousarray(array, np.float32)
    ext = os.fspath(path).rsplit(".", 1)[-1].lower()
    if ext == "npy":
        write_npy(path, array)
        return
    if ext != "exr":
        raise ValueError(f"float image {path}: not .npy or .exr")
    import OpenEXR

    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with atomic.atomic_path(path) as tmp:
        OpenEXR.File(header, {"RGB" if array.ndim == 3 else "Z": array}).write(str(tmp))


def gif_delay_ms(fps: float) -> int:
    """The per-frame delay a GIF stores for `fps`: whole hundredths of a second, at least 2 (browsers slow less)."""
    return 10 * max(2, round(100.0 / fps))


def write_gif(path: str | os.PathLike, frames: Sequence[np.ndarray], fps: float = 24.0) -> None:
    """Write uint8 RGB frames (H, W, 3) as a looping GIF whose frame delay is `gif_delay_ms(fps)` (Pillow: ms)."""
    images = [Image.fromarray(np.ascontiguousarray(frame, np.uint8)) for frame in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=gif_delay_ms(fps), loop=0)
    atomic.write_bytes(path, buffer.getvalue())


def write_mp4(path: str | os.PathLike, frames: Sequence[np.ndarray], fps: float = 24.0) -> None:
    """Write uint8 RGB frames (H, W, 3) as an H.264 MP4 (yuv420p, plays everywhere) through imageio-ffmpeg.

    Odd sizes are padded to even ones (yuv420p needs them)."""
    import imageio_ffmpeg

    height, width = frames[0].shape[:2]
    pad = ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
    with atomic.atomic_path(path) as tmp:
        writer = imageio_ffmpeg.write_frames(str(tmp), (width, height), fps=fps, codec="libx264", macro_block_size=1,
                                             output_params=pad, ffmpeg_log_level="error")
        writer.send(None)  # start ffmpeg
        try:
            for frame in frames:
                writer.send(np.ascontiguousarray(frame, np.uint8))
        finally:
            writer.close()


# A compact perceptual colour ramp (dark blue -> teal -> yellow, after viridis), sampled at 6 stops.
_RAMP = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37], [255, 255, 255]],
                 np.float64) / 255.0


def heatmap(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Scalar map -> uint8 RGB with the ramp above; values clamp to [lo, hi]; NaN shows white."""
    v = np.asarray(values, np.float64)
    x = np.clip((np.nan_to_num(v, nan=hi) - lo) / max(hi - lo, 1e-30), 0.0, 1.0) * (len(_RAMP) - 2)
    i = np.minimum(x.astype(np.int64), len(_RAMP) - 3)
    w = (x - i)[..., None]
    rgb = _RAMP[i] * (1.0 - w) + _RAMP[i + 1] * w
    rgb[np.isnan(v)] = _RAMP[-1]
    return (rgb * 255.0 + 0.5).astype(np.uint8)


def depth_range(depth: np.ndarray, far: float) -> tuple[float, float] | None:
    """The nearest and the farthest hit distance in a depth map (escaped rays, depth >= far, left out); None if no hit."""
    d = np.asarray(depth, np.float64)
    hit = (d < far) & (d > 0.0)
    return (float(d[hit].min()), float(d[hit].max())) if hit.any() else None


def depth_image(depth: np.ndarray, far: float) -> np.ndarray:
    """Depth -> grey uint8 by inverse depth (resolves near objects against a far floor):
    the nearest hit (`depth_range`) is white, the farthest dark grey (38), escaped rays (depth >= far) black."""
    d = np.asarray(depth, np.float64)
    hit = (d < far) & (d > 0.0)
    span = depth_range(d, far)
    if span is None:
        return np.zeros(d.shape, np.uint8)
    inv = np.where(hit, 1.0 / np.where(hit, d, 1.0), 0.0)
    lo, hi = 1.0 / span[1], 1.0 / span[0]
    g = 0.15 + 0.85 * (inv - lo) / max(hi - lo, 1e-12)
    return np.where(hit, g * 255.0 + 0.5, 0.0).astype(np.uint8)


def normal_image(normals: np.ndarray) -> np.ndarray:
    """World-space normals in [-1, 1] -> RGB uint8 (the usual 0.5 + 0.5 n); zero normals stay black."""
    n = np.asarray(normals, np.float64)
    rgb = (0.5 + 0.5 * n) * 255.0 + 0.5
    rgb[np.all(n == 0.0, axis=-1)] = 0.0
    return rgb.astype(np.uint8)


def diff_heatmap(a: np.ndarray, b: np.ndarray, atol: float) -> np.ndarray:
    """Where two images differ: per-pixel max channel error on a log scale, atol/100 .. 1000*atol.

    Pixels within atol come out in the dark half of the ramp, pixels outside it bright.
    """
    err = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    err = err.max(axis=-1) if err.ndim == 3 else err
    lo, hi = diff_heatmap_range(atol)
    return heatmap(np.log10(np.maximum(err, 10.0 ** lo)), lo, hi)


def diff_heatmap_range(atol: float) -> tuple[float, float]:
    """The log10 |A - B| range `diff_heatmap` spreads over its colours (for a colour bar beside it)."""
    return float(np.log10(atol * 1e-2)), float(np.log10(atol * 1e3))


def heatmap_colours() -> np.ndarray:
    """`heatmap`'s colour stops from `lo` to `hi`, evenly spaced: (N, 3) float64 in [0, 1]."""
    return _RAMP[:-1].copy()


def caption_panel(panel: np.ndarray, caption: str, labels: Sequence[str] = ()) -> np.ndarray:
    """An sRGB uint8 (H, W, 3) panel with a strip above it: `caption` on the left, and each of `labels`
    over its equal-width column (e.g. target | current | difference)."""
    from PIL import ImageDraw, ImageFont

    panel = np.asarray(panel, np.uint8)
    strip = 14 if not labels else 26
    image = Image.new("RGB", (panel.shape[1], panel.shape[0] + strip), (24, 24, 24))
    image.paste(Image.fromarray(panel), (0, strip))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    draw.text((3, 1), caption, fill=(235, 235, 235), font=font)
    width = panel.shape[1] / max(len(labels), 1)
    for k, label in enumerate(labels):
        draw.text((int(k * width) + 3, 13), label, fill=(180, 200, 255), font=font)
    return np.asarray(image)
