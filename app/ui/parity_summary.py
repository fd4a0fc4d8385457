"""What the parity panel shows about frame A vs frame B, computed off the UI thread.

The controller's link thread calls `summarise` on every answer of the parity worker (it
touches every value: a heat map and a histogram of the whole frame); the panel
(app/ui/panels/parity_panel.py) only draws the result, with the same `LOG_RANGE` and `HIST_BINS`.

    >>> import numpy as np
    >>> out = summarise(np.zeros((2, 2, 3)), np.full((2, 2, 3), 1e-3), atol=1e-4)
    >>> out["report"].share_within, int(out["hist_counts"].sum()), out["heatmap"].shape
    (0.0, 12, (2, 2, 3))
    >>> out["log_range"], out["worst_pixels"][0]  # the heat map's scale, from the data and the tolerance
    ((-5.0, -3.0), (0, 0, 0.001))
"""
from __future__ import annotations

import numpy as np

from engine.image_io import diff_log_range, error_heatmap, pixel_error, worst_pixels
from engine.parity import abs_error, compare

LOG_RANGE = (-9.0, 0.0)  # the histogram spans 1e-9 .. 1 (exact agreement lands in the first bin)
HIST_BINS = 36
WORST_PIXELS = 5  # the pixels the panel rings on the heat map


def summarise(a: np.ndarray, b: np.ndarray, atol: float) -> dict:
    """The `ParityReport`, the |A - B| heat map (H, W, 3) uint8 on a log scale over the data's own range (so that
    backends that agree closely still show where they differ), its worst pixels and the histogram of log10 |A - B|
    over every value.

    Args: a, b: frames of one shape (H, W, 3), any float dtype; atol: the tolerance the report counts within.
    Returns: {"report", "heatmap", "log_range" (log10 lo, hi: `engine.image_io.diff_log_range`, holding atol),
    "worst_pixels" (row, column, |A - B|) largest first, "hist_counts" (HIST_BINS,) float64, "hist_log_err"
    (HIST_BINS,) bin centres}.
    """
    report = compare(a, b, atol)
    err = abs_error(a, b)
    with np.errstate(divide="ignore"):
        log_err = np.clip(np.log10(err), *LOG_RANGE)
    counts, edges = np.histogram(log_err, bins=HIST_BINS, range=LOG_RANGE)
    per_pixel = pixel_error(a, b)
    log_range = diff_log_range(per_pixel, atol)
    return {"report": report, "heatmap": error_heatmap(per_pixel, log_range), "log_range": log_range,
            "worst_pixels": worst_pixels(per_pixel, WORST_PIXELS), "hist_counts": counts.astype(np.float64),
            "hist_log_err": 0.5 * (edges[:-1] + edges[1:])}
