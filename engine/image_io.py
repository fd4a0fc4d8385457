"""Image output: sRGB encoding, PNG / float (npy, EXR) / GIF / MP4 writing, false-colour maps and their legends.
All writes are atomic.

Used by the renderer's CLI, the parity claim and the GUI. Inputs are numpy arrays:
linear RGB in [0, 1] (H, W, 3) float32, or scalar maps (H, W). PNGs can carry text
chunks (`tEXt`), which is where an 8-bit AOV says what range of values it encodes and a
frame says who drew it (`png_edges_text`, read back by `png_edges`). `with_legend` draws a `Legend` (a title
with units, a colour bar with ticks, swatches) in a strip under a false-colour picture, so that the PNG is read
without the docs; `depth_legend`, `steps_legend` and `normals_legend` are the AOVs' legends.
"""
from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from typing import Callable, Sequence

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


def _near_fraction(depth: np.ndarray, near: float, far: float) -> np.ndarray:
    """Where a depth lies between the farthest (0) and the nearest (1) hit, linear in 1/depth."""
    return (1.0 / depth - 1.0 / far) / max(1.0 / near - 1.0 / far, 1e-12)


def _depth_grey(fraction: np.ndarray) -> np.ndarray:
    """`_near_fraction` -> grey level 0..1: the farthest hit dark grey (0.15, 38 of 255), the nearest white."""
    return 0.15 + 0.85 * fraction


def depth_image(depth: np.ndarray, far: float) -> np.ndarray:
    """Depth -> grey uint8 by inverse depth (resolves near objects against a far floor):
    the nearest hit (`depth_range`) is white, the farthest dark grey (38), escaped rays (depth >= far) black."""
    d = np.asarray(depth, np.float64)
    hit = (d < far) & (d > 0.0)
    span = depth_range(d, far)
    if span is None:
        return np.zeros(d.shape, np.uint8)
    g = _depth_grey(_near_fraction(np.where(hit, d, span[1]), *span))
    return np.where(hit, g * 255.0 + 0.5, 0.0).astype(np.uint8)


def normal_image(normals: np.ndarray) -> np.ndarray:
    """World-space normals in [-1, 1] -> RGB uint8 (the usual 0.5 + 0.5 n); zero normals stay black."""
    n = np.asarray(normals, np.float64)
    rgb = (0.5 + 0.5 * n) * 255.0 + 0.5
    rgb[np.all(n == 0.0, axis=-1)] = 0.0
    return rgb.astype(np.uint8)


def pixel_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|A - B| per pixel, the largest over the channels: (H, W) float64 from two (H, W[, C]) images."""
    err = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return err.max(axis=-1) if err.ndim == 3 else err


def diff_log_range(err: np.ndarray, atol: float) -> tuple[float, float]:
    """The log10 |A - B| range a difference heat map spreads its colours over, from the data: whole decades from
    the smallest nonzero error (its 1st percentile: a few stray tiny values do not stretch it) to the largest, widened
    to hold the tolerance `atol` at least a decade from either end (a mark at an end is missed). Exact agreement
    takes the bottom colour."""
    err = np.asarray(err, np.float64)
    nonzero = err[(err > 0) & np.isfinite(err)]
    mark = math.log10(atol)
    lo, hi = (math.log10(np.percentile(nonzero, 1)), math.log10(nonzero.max())) if nonzero.size else (mark, mark)
    return float(min(math.floor(lo), math.ceil(mark) - 1)), float(max(math.ceil(hi), math.floor(mark) + 1))


def error_heatmap(err: np.ndarray, log_range: tuple[float, float]) -> np.ndarray:
    """An (H, W) error map -> uint8 RGB on a log scale over `log_range` (log10; zero and less take the bottom colour)."""
    lo, hi = log_range
    return heatmap(np.log10(np.maximum(err, 10.0 ** lo)), lo, hi)


def diff_heatmap(a: np.ndarray, b: np.ndarray, atol: float) -> np.ndarray:
    """Where two images differ: `pixel_error` on a log scale over `diff_log_range` (the data's own range)."""
    err = pixel_error(a, b)
    return error_heatmap(err, diff_log_range(err, atol))


def worst_pixels(err: np.ndarray, count: int = 5) -> list[tuple[int, int, float]]:
    """The `count` largest nonzero errors of an (H, W) map, largest first: (row, column, error)."""
    flat = np.asarray(err, np.float64).ravel()
    order = np.argsort(-np.nan_to_num(flat, nan=np.inf), kind="stable")[:count]
    width = err.shape[1]
    return [(int(i // width), int(i % width), float(flat[i])) for i in order if not flat[i] == 0.0]


def diff_legend(log_range: tuple[float, float], atol: float) -> Legend:
    """A difference heat map's legend: the ramp over `log_range` with its decades and the tolerance marked."""
    lo, hi = log_range

    def at(value: float) -> float:
        return (value - lo) / (hi - lo)

    decades = range(math.ceil(lo), math.floor(hi) + 1)
    ticks = ((at(math.log10(atol)), f"atol {atol:g}"),) + tuple((at(k), f"1e{k}") for k in decades)
    return Legend("|A - B| per pixel (largest channel), log scale; 0 takes the left end",
                  lambda positions: heatmap(positions, 0.0, 1.0), ticks)


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


@dataclass(frozen=True)
class Legend:
    """What the strip under an image (`with_legend`) says: a title with the units, a colour bar with ticks, swatches.

    `bar` maps positions along the bar (0 = left end, 1 = right end; (N,) float) to the colours the image uses
    there (uint8 RGB (N, 3)); `ticks` are (position, label) pairs on it; `swatches` are (RGB, label) pairs for
    colours that are not on a scale (no hit, an axis)."""

    title: str
    bar: Callable[[np.ndarray], np.ndarray] | None = None
    ticks: tuple[tuple[float, str], ...] = ()
    swatches: tuple[tuple[tuple[int, int, int], str], ...] = ()


LEGEND_MIN_WIDTH = 360  # a narrower image is padded on the right so that the legend's text fits
LEGEND_HEIGHT = 58  # rows added under an image up to 1.5k pixels wide (`legend_height`: wider ones get more)
_LEGEND_FONT_PX = 11
_BAR_ROWS = (20, 32)  # the colour bar's rows within the strip; the title above it, tick labels under it
_MARGIN = 10  # pixels left and right of the bar (a label centred on an end tick still fits)
_BACKGROUND = (24, 24, 24)


def _legend_scale(width: int) -> int:
    """Legend pixels per base pixel for an image `width` wide: the legend grows with the picture, so that a
    2048-wide frame shown at half size on a screen still reads (its text 11 pixels high there too)."""
    return max(1, round(width / 1024))


def legend_height(width: int) -> int:
    """The rows `with_legend` adds under an image `width` wide."""
    return LEGEND_HEIGHT * _legend_scale(width)


def legend_bar_box(width: int, legend: Legend) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) pixel bounds of the colour bar in `with_legend`'s output for an image `width`
    wide (rows counted from the strip's top; add the image's height): where its colours and ticks are."""
    canvas, k = max(width, LEGEND_MIN_WIDTH), _legend_scale(width)
    swatches = 0 if not legend.swatches else canvas // 3
    return _BAR_ROWS[0] * k, _BAR_ROWS[1] * k, _MARGIN * k, canvas - _MARGIN * k - swatches


def with_legend(pixels: np.ndarray, legend: Legend) -> np.ndarray:
    """An image (uint8 (H, W) grey or (H, W, 3)) with `legend` drawn in a strip under it: (H + legend_height(W),
    max(W, LEGEND_MIN_WIDTH), 3) uint8. The image's own pixels are unchanged, at the top left. Tick labels that
    would overlap an earlier one are left out (so list the ones that matter, e.g. the data's ends, first)."""
    from PIL import ImageDraw, ImageFont

    pixels = np.asarray(pixels, np.uint8)
    rgb = np.repeat(pixels[..., None], 3, axis=-1) if pixels.ndim == 2 else pixels
    height, width = rgb.shape[:2]
    k = _legend_scale(width)  # every length below is in base pixels times k
    canvas = np.empty((height + legend_height(width), max(width, LEGEND_MIN_WIDTH), 3), np.uint8)
    canvas[:] = _BACKGROUND
    canvas[:height, :width] = rgb
    top, bottom, left, right = legend_bar_box(width, legend)
    if legend.bar is not None:
        positions = (np.arange(left, right) - left + 0.5) / (right - left)
        canvas[height + top:height + bottom, left:right] = np.asarray(legend.bar(positions), np.uint8)[None]
    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=_LEGEND_FONT_PX * k)
    text = (235, 235, 235)
    draw.text((left, height + 3 * k), legend.title, fill=text, font=font)
    taken: list[tuple[float, float]] = []
    for position, label in legend.ticks if legend.bar is not None else ():
        x = left + position * (right - left)
        label_width = draw.textlength(label, font=font)
        start = min(max(x - label_width / 2, 1.0), canvas.shape[1] - label_width - 1)
        if any(a < start + label_width + 6 * k and start - 6 * k < b for a, b in taken):
            continue
        taken.append((start, start + label_width))
        draw.line([(x, height + bottom), (x, height + bottom + 3 * k)], fill=text, width=k)
        draw.text((start, height + bottom + 4 * k), label, fill=text, font=font)
    # beside the bar in columns of three; without a bar in one row under the title
    rows = 3 if legend.bar is not None else 1
    x0 = right + left if legend.bar is not None else left
    column_width = (canvas.shape[1] - x0) // max(math.ceil(len(legend.swatches) / rows), 1)
    for n, (colour, label) in enumerate(legend.swatches):
        column, row = divmod(n, rows)
        sx, sy = x0 + column * column_width, height + top + (13 * row - 2) * k
        draw.rectangle([sx, sy, sx + 9 * k, sy + 9 * k], fill=tuple(colour), outline=(140, 140, 140))
        draw.text((sx + 13 * k, sy - k), label, fill=text, font=font)
    return np.asarray(image)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) within [lo, hi], about `count` of them."""
    if not hi > lo:
        return [lo]
    step = 10.0 ** math.floor(math.log10((hi - lo) / count))
    step *= next(m for m in (1, 2, 5, 10) if (hi - lo) / (step * m) <= count)
    return [k * step for k in range(math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) + 1)]


NO_HIT = ((0, 0, 0), "no hit")


def depth_legend(depth: np.ndarray, far: float) -> Legend:
    """`depth_image`'s legend: a grey bar from the nearest hit (left, white) to the farthest (right), its ticks at
    those two depths and round depths between them, in metres."""
    span = depth_range(depth, far)
    if span is None:
        return Legend("depth: no ray hit anything", swatches=(NO_HIT,))
    near, farthest = span

    def grey(positions: np.ndarray) -> np.ndarray:
        level = (_depth_grey(1.0 - positions) * 255.0 + 0.5).astype(np.uint8)
        return np.repeat(level[:, None], 3, axis=1)

    def at(d: float) -> float:  # a depth's position on the bar: the fraction of the way in 1/depth, far side right
        return float(1.0 - _near_fraction(np.float64(d), near, farthest))

    ticks = [(at(near), f"{near:.3g}"), (at(farthest), f"{farthest:.3g}")]
    ticks += [(at(d), f"{d:g}") for d in nice_ticks(near, farthest, 8) if near < d < farthest]  # 1/depth crowds the far end
    return Legend("depth along the ray (m), grey linear in 1/depth", grey, tuple(ticks), (NO_HIT,))


def steps_legend(max_steps: int) -> Legend:
    """The march-steps heat map's legend (`heatmap(steps, 0, max_steps)`): its ramp with round step counts."""
    ticks = tuple((v / max_steps, f"{v:g}") for v in nice_ticks(0, max_steps))
    return Legend(f"ray-march steps per pixel (0 .. {max_steps}, the march's limit)",
                  lambda positions: heatmap(positions * max_steps, 0, max_steps), ticks)


def normals_legend() -> Legend:
    """`normal_image`'s legend: the colour of a normal along each world axis (y up)."""
    axes = [(sign * np.eye(3)[k], f"{'+' if sign > 0 else '-'}{name}") for k, name in enumerate("xyz") for sign in (1, -1)]
    swatches = tuple((tuple(int(c) for c in normal_image(n[None])[0]), label) for n, label in axes)
    return Legend("world-space unit normal n as RGB = 0.5 + 0.5 n (y up)", swatches=swatches + (NO_HIT,))
