"""Image output: sRGB encoding, PNG / npy / GIF writing, false-colour maps. All writes are atomic.

Used by the renderer's CLI, the parity claim and the GUI. Inputs are numpy arrays:
linear RGB in [0, 1] (H, W, 3) float32, or scalar maps (H, W).
"""
from __future__ import annotations

import io
import os
from typing import Sequence

import numpy as np
from PIL import Image

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


def _png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=4)
    return buffer.getvalue()


def write_png(path: str | os.PathLike, pixels: np.ndarray) -> None:
    """Write uint8 pixels (H, W) or (H, W, 3) as a PNG."""
    atomic.write_bytes(path, _png_bytes(np.ascontiguousarray(pixels, np.uint8)))


def write_linear_png(path: str | os.PathLike, linear: np.ndarray) -> None:
    write_png(path, srgb8(linear))


def write_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with atomic.atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


def write_gif(path: str | os.PathLike, frames: Sequence[np.ndarray], fps: float = 24.0) -> None:
    """Write uint8 RGB frames as a looping GIF (through imageio)."""
    import imageio.v2 as imageio

    with atomic.atomic_path(path) as tmp:
        imageio.mimsave(tmp, list(frames), format="GIF", duration=1.0 / fps, loop=0)


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


def depth_image(depth: np.ndarray, far: float) -> np.ndarray:
    """Depth -> grey uint8 by inverse depth (resolves near objects against a far floor):
    the nearest hit is white, the farthest dark grey, escaped rays (depth >= far) black."""
    d = np.asarray(depth, np.float64)
    hit = (d < far) & (d > 0.0)
    if not hit.any():
        return np.zeros(d.shape, np.uint8)
    inv = np.where(hit, 1.0 / np.where(hit, d, 1.0), 0.0)
    lo, hi = float(inv[hit].min()), float(inv[hit].max())
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
    log = np.log10(np.maximum(err, atol * 1e-2))
    return heatmap(log, np.log10(atol * 1e-2), np.log10(atol * 1e3))
