"""What the parity panel shows about frame A vs frame B, computed off the UI thread.

The controller's link thread calls `summarise` on every answer of the parity worker (it
touches every value: a heat map and a histogram of the whole frame); the panel
(app/ui/panels/parity_panel.py) only draws the result, with the same `LOG_RANGE` and `HIST_BINS`.

    >>> import numpy as np
    >>> out = summarise(np.zeros((2, 2, 3)), np.full((2, 2, 3), 1e-3), atol=1e-4)
    >>> out["report"].share_within, int(out["hist_counts"].sum()), out["heatmap"].shape
    (0.0, 12, (2, 2, 3))
"""
from __future__ import annotations

import numpy as np

from engine.image_io import diff_heatmap
from engine.parity import abs_error, compare

LOG_RANGE = (-9.0, 0.0)  # the histogram spans 1e-9 .. 1 (exact agreement lands in the first bin)
HIST_BINS = 36


def summarise(a: np.ndarray, b: np.ndarray, atol: float) -> dict:
    """The `ParityReport`, the |A - B| heat map (H, W, 3) uint8 and the histogram of log10 |A - B| over every value.

    Args: a, b: frames of one shape (H, W, 3), any float dtype; atol: the tolerance the report counts within.
    Returns: {"report", "heatmap", "hist_counts" (HIST_BINS,) float64, "hist_log_err" (HIST_BINS,) bin centres}.
    """
    report = compare(a, b, atol)
    err = abs_error(a, b)
    with np.errstate(divide="ignore"):
        log_err = np.clip(np.log10(err), *LOG_RANGE)
    counts, edges = np.histogram(log_err, bins=HIST_BINS, range=LOG_RANGE)
    return {"report": report, "heatmap": diff_heatmap(a, b, atol), "hist_counts": counts.astype(np.float64),
            "hist_log_err": 0.5 * (edges[:-1] + edges[1:])}
