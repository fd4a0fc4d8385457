"""Small PNG plots drawn with Pillow (no plotting library): a loss curve on a log scale."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

from engine.image_io import write_png

WIDTH, HEIGHT = 800, 480
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50


def loss_curve_png(path: str | Path, losses: Sequence[float], title: str) -> None:
    """Plot `losses` against iteration with a log10 y axis (one grid line per decade); write a PNG atomically."""
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    positive = [v for v in losses if v > 0 and math.isfinite(v)]
    draw.text((LEFT, 12), title, fill="black")
    if positive:
        lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
        hi = max(hi, lo + 1)
        plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
        n = max(len(losses) - 1, 1)

        def xy(i: int, value: float) -> tuple[float, float]:
            return (LEFT + plot_w * i / n, TOP + plot_h * (hi - math.log10(value)) / (hi - lo))

        for decade in range(lo, hi + 1):
            y = xy(0, 10.0 ** decade)[1]
            draw.line([(LEFT, y), (WIDTH - RIGHT, y)], fill=(220, 220, 220))
            draw.text((8, y - 6), f"1e{decade}", fill="black")
        for tick in range(0, 6):
            i = round(n * tick / 5)
            x = xy(i, 10.0 ** hi)[0]
            draw.text((x - 10, HEIGHT - BOTTOM + 8), str(i), fill="black")
        draw.rectangle([LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM], outline="black")
        points = [xy(i, v) for i, v in enumerate(losses) if v > 0 and math.isfinite(v)]
        draw.line(points, fill=(200, 40, 40), width=2) if len(points) > 1 else draw.point(points, fill="red")
        draw.text((WIDTH // 2 - 30, HEIGHT - 22), "iteration", fill="black")
    write_png(path, np.asarray(image))
