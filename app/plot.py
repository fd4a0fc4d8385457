"""Plots written by the command line, drawn with matplotlib (no window, no pyplot state).

`write_loss_plot(stem, losses, title)` writes `<stem>.png` and `<stem>.svg`: the loss
against the iteration on a log10 y axis, both axes labelled with their units, and a
marked iteration when the run diverged or was interrupted there.
"""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Sequence

from engine import atomic

LOSS_LABEL = "Chamfer loss\n(mean squared distance, target half-extent = 1)"
SIZE_IN, DPI = (8.0, 4.8), 100  # the PNG: 800x480 pixels


def write_loss_plot(stem: str | Path, losses: Sequence[float], title: str, mark: tuple[int, str] | None = None,
                    ylabel: str = LOSS_LABEL) -> list[Path]:
    """Write `stem`.png and `stem`.svg (atomically); return their paths.

    `losses[i]` is the loss at iteration i (before its update); non-positive and non-finite
    values are left out of the log-scale curve. `mark=(iteration, text)` draws a labelled
    vertical line there (e.g. `(412, "diverged")`).

        write_loss_plot("out/fit/loss", [0.1, 0.05, 0.01], "Chamfer loss, spot")
    """
    import matplotlib
    from matplotlib.figure import Figure

    # SVG text stays text (searchable, editable); fixed ids and no date: the same run gives the same bytes
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shannon-autograd"}):
        return _draw(Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained"), Path(stem), losses, title, mark, ylabel)


def _draw(figure, stem: Path, losses: Sequence[float], title: str, mark: tuple[int, str] | None,
          ylabel: str) -> list[Path]:
    axes = figure.add_subplot()
    points = [(i, value) for i, value in enumerate(losses) if value > 0 and math.isfinite(value)]
    if points:
        axes.plot(*zip(*points), color="#c0392b", linewidth=1.5, label="loss")
        axes.set_yscale("log")
    else:
        axes.text(0.5, 0.5, "no finite positive loss to plot", transform=axes.transAxes, ha="center")
    if mark is not None:
        axes.axvline(mark[0], color="#555555", linestyle="--", linewidth=1.0, label=f"{mark[1]} at iteration {mark[0]}")
    if points or mark is not None:
        axes.legend(loc="best")
    axes.set_xlabel("iteration")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, which="major", alpha=0.4)
    axes.grid(True, which="minor", alpha=0.15)
    written = []
    for fmt in ("png", "svg"):
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt, metadata={"Software": "shannon-autograd"} if fmt == "png" else {"Date": None})
        path = stem.with_name(f"{stem.name}.{fmt}")
        atomic.write_bytes(path, buffer.getvalue())
        written.append(path)
    return written
