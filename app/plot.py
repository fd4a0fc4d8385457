"""Plots written by the command line, drawn with matplotlib (no window, no pyplot state).

`write_loss_plot(stem, losses, title)` writes `<stem>.png` and `<stem>.svg`: the loss
against the iteration on a log10 y axis, both axes labelled with their units, and a
marked iteration when the run diverged or was interrupted there.
"""
from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import Sequence

from engine import atomic

LOSS_LABEL = "Chamfer loss\n(mean squared distance, target half-extent = 1)"
SIZE_IN, DPI = (8.0, 4.8), 100  # the PNG: 800x480 pixels
TITLE_WIDTH = 90  # characters a title line holds at that width


def write_loss_plot(stem: str | Path, losses: Sequence[float], title: str, mark: tuple[int, str] | None = None,
                    ylabel: str = LOSS_LABEL, marks: Sequence[tuple[int, str]] = (),
                    points: Sequence[tuple[int, float]] = (), points_label: str = "",
                    losses_label: str = "loss") -> list[Path]:
    """Write `stem`.png and `stem`.svg (atomically); return their paths.

    `losses[i]` is the loss at iteration i (before its update); non-positive and non-finite
    values are left out of the log-scale curve. `mark=(iteration, text)` draws a labelled
    vertical line there (e.g. `(412, "diverged")`); `marks` are lighter labelled lines where a phase began
    (a schedule or pyramid change); `points` ((iteration, value) pairs, labelled `points_label`) a second
    series drawn with markers (e.g. the full-resolution image loss at its checks).

        write_loss_plot("out/fit/loss", [0.1, 0.05, 0.01], "Chamfer loss, spot")
    """
    import matplotlib
    from matplotlib.figure import Figure

    # SVG text stays text (searchable, editable); fixed ids and no date: the same run gives the same bytes
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shannon-autograd"}):
        figure = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
        axes = figure.add_subplot()
        curve = _positive(enumerate(losses))
        if curve:
            axes.plot(*zip(*curve), color="#c0392b", linewidth=1.5, label=losses_label)
        checks = _positive(points)
        if checks:
            axes.plot(*zip(*checks), color="#2c3e50", marker="o", markersize=3, linewidth=1.0, label=points_label)
        if curve or checks:
            axes.set_yscale("log")
        else:
            axes.text(0.5, 0.5, "no finite positive loss to plot", transform=axes.transAxes, ha="center")
        _marks(axes, marks)
        if mark is not None:
            axes.axvline(mark[0], color="#555555", linestyle="--", linewidth=1.0,
                         label=f"{mark[1]} at iteration {mark[0]}")
        if curve or checks or mark is not None:  # below the axes: inside, a long label hid the curves and the y label
            figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center", fontsize="small")
        return _finish(figure, axes, Path(stem), "iteration", ylabel, title)


def write_error_plot(stem: str | Path, errors: dict[str, Sequence[float]], units: dict[str, str],
                     tolerances: dict[str, float], title: str, marks: Sequence[tuple[int, str]] = ()) -> list[Path]:
    """Write `stem`.png/.svg: one panel per group, its largest parameter error per iteration (log scale, in
    the group's unit) with its tolerance as a dashed line; `marks` as in `write_loss_plot`."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shannon-autograd"}):
        figure = Figure(figsize=(SIZE_IN[0], 1.9 * max(len(errors), 1)), dpi=DPI, layout="constrained")
        panels = figure.subplots(max(len(errors), 1), 1, sharex=True, squeeze=False)[:, 0]
        for axes, (group, values) in zip(panels, errors.items()):
            curve = _positive(enumerate(values))
            if curve:
                axes.plot(*zip(*curve), color="#2471a3", linewidth=1.5, label=f"{group} (largest)")
                axes.set_yscale("log")
            axes.axhline(tolerances[group], color="#27ae60", linestyle="--", linewidth=1.0,
                         label=f"tolerance {tolerances[group]:g} {units[group]}")
            _marks(axes, marks, labels=False)
            axes.set_ylabel(units[group])
            axes.legend(loc="upper right", fontsize="small")
            axes.grid(True, which="major", alpha=0.4)
        return _finish(figure, panels[-1], Path(stem), "iteration", None, title, top=panels[0])


def _positive(pairs) -> list[tuple[int, float]]:
    return [(i, v) for i, v in pairs if v > 0 and math.isfinite(v)]


def _marks(axes, marks: Sequence[tuple[int, str]], labels: bool = True) -> None:
    at: dict[int, list[str]] = {}  # phases that begin at the same iteration share one line and one label
    for iteration, text in marks:
        at.setdefault(iteration, []).append(text)
    for iteration, texts in at.items():
        axes.axvline(iteration, color="#999999", linestyle=":", linewidth=1.0)
        if labels:
            axes.annotate("; ".join(texts), (iteration, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                          fontsize=7, va="top", ha="right", color="#555555")


def _finish(figure, axes, stem: Path, xlabel: str, ylabel: str | None, title: str, top=None) -> list[Path]:
    axes.set_xlabel(xlabel)
    if ylabel is not None:
        axes.set_ylabel(ylabel)
    (top or axes).set_title(textwrap.fill(title, TITLE_WIDTH), fontsize="medium")
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
