"""Cross-backend parity: run one named computation on two backends and compare.

`compare(a, b, atol)` measures two arrays: the share of elements within an absolute
tolerance, the max absolute and relative errors and the worst element;
`agreeing_pixels(image_a, image_b, atol)` the pixels of two images that agree, and
`relative_gap(a, b)` one array's largest difference from another relative to its largest
value (the render gradient's parity). Tolerances are the caller's (the claims' thresholds).
`run_parity(name, inputs, arch_a, arch_b)` runs computation `name` (see
`engine.computations`) on both backends, each in its own worker process, at the
same time, and compares every output array.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from engine.worker import DEFAULT_TIMEOUT_S, BackendWorker


@dataclass(frozen=True)
class ParityReport:
    count: int
    atol: float
    share_within: float  # fraction of elements with |a - b| <= atol (NaN anywhere counts as outside)
    max_abs_err: float
    max_rel_err: float  # |a - b| / max(|a|, |b|), 0 where both are 0
    worst_index: tuple[int, ...]  # index of the largest |a - b|
    worst_a: float
    worst_b: float

    def passed(self, min_share: float = 1.0, max_abs: float | None = None) -> bool:
        return self.share_within >= min_share and (max_abs is None or self.max_abs_err <= max_abs)

    def summary(self) -> str:
        return (
            f"{self.share_within * 100:.4f}% within {self.atol:g}, max abs {self.max_abs_err:.3g}, "
            f"max rel {self.max_rel_err:.3g} at {list(self.worst_index)} ({self.worst_a:.9g} vs {self.worst_b:.9g})"
        )

    def as_record(self) -> dict:
        return asdict(self)


def mesh_diagonal(vertices: np.ndarray) -> float:
    """Length of a mesh's bounding-box diagonal (the scale closest-point distance errors are given in)."""
    return float(np.linalg.norm(vertices.max(axis=0) - vertices.min(axis=0)))


def distance_error(dist2_a: np.ndarray, dist2_b: np.ndarray, scale: float) -> float:
    """max |d_a - d_b| / scale over the points, from squared distances (float64 square roots)."""
    a, b = np.sqrt(np.asarray(dist2_a, np.float64)), np.sqrt(np.asarray(dist2_b, np.float64))
    return float(np.max(np.abs(a - b))) / scale


def abs_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float64, with inf wherever either side is not finite (unless both agree exactly)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"parity: shapes differ: {a.shape} vs {b.shape}")
    with np.errstate(invalid="ignore"):
        err = np.array(np.abs(a - b))  # an array even for 0-d inputs
    err[a == b] = 0.0  # equal infinities agree
    err[np.isnan(err)] = np.inf  # a NaN on either side never agrees
    return err


def agreeing_pixels(image_a: np.ndarray, image_b: np.ndarray, atol: float) -> np.ndarray:
    """(H, W) bool: the pixels whose two (H, W, C) images agree within `atol` in every channel.

    >>> agreeing_pixels(np.zeros((1, 2, 3)), np.array([[[0.0, 0.0, 0.0], [0.0, 1e-3, 0.0]]]), 1e-4).tolist()
    [[True, False]]
    """
    return np.abs(np.asarray(image_a) - np.asarray(image_b)).max(axis=-1) <= atol


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |a| (inf when `a` is all zero): how far `b` is from `a`, relative to `a`'s largest value.

    >>> relative_gap(np.array([2.0, -4.0]), np.array([2.0, -3.5]))
    0.125
    """
    scale = float(np.abs(a).max())
    gap = float(np.abs(np.asarray(a) - np.asarray(b)).max())
    return gap / scale if scale > 0.0 else float("inf")


def compare(a: np.ndarray, b: np.ndarray, atol: float) -> ParityReport:
    """Compare two arrays element by element (see `ParityReport`)."""
    err = abs_error(a, b)
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if err.size == 0:
        return ParityReport(0, atol, 1.0, 0.0, 0.0, (), 0.0, 0.0)
    scale = np.maximum(np.abs(a64), np.abs(b64))
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(err == 0.0, 0.0, err / scale)
    rel = np.where(np.isnan(rel), np.inf, rel)
    flat_worst = int(np.argmax(err))
    worst = np.unravel_index(flat_worst, err.shape)
    return ParityReport(
        count=int(err.size),
        atol=float(atol),
        share_within=float(np.count_nonzero(err <= atol) / err.size),
        max_abs_err=float(err.max()),
        max_rel_err=float(rel.max()),
        worst_index=tuple(int(i) for i in worst),
        worst_a=float(a64[worst]),
        worst_b=float(b64[worst]),
    )


def compare_outputs(out_a: dict, out_b: dict, atol: float) -> dict[str, ParityReport]:
    """Compare every array two runs of one computation returned."""
    if out_a.keys() != out_b.keys():
        raise ValueError(f"parity: outputs differ: {sorted(out_a)} vs {sorted(out_b)}")
    return {key: compare(out_a[key], out_b[key], atol) for key in out_a}


def run_parity(
    name: str,
    inputs: dict,
    arch_a: str,
    arch_b: str,
    atol: float,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, ParityReport]:
    """Run computation `name` on `arch_a` and `arch_b` (one worker process each) and compare."""

    def run_on(arch: str) -> dict:
        with BackendWorker(arch) as worker:
            return worker.call(name, timeout_s=timeout_s, **inputs)

    with ThreadPoolExecutor(max_workers=2) as pool:
        future_a, future_b = pool.submit(run_on, arch_a), pool.submit(run_on, arch_b)
        out_a, out_b = future_a.result(), future_b.result()
    return compare_outputs(out_a, out_b, atol)
