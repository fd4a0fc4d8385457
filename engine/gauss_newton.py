"""Levenberg-Marquardt steps and identifiability for a least-squares image residual (host numpy, ~20 unknowns).

The inverse render's unknowns are a few scene parameters; its residual is an image (tens of
thousands of numbers) whose exact Jacobian the differentiable renderer gives per pixel
(`engine.diff_render.DiffRenderer.image_jacobian`). With so few unknowns the normal equations
are tiny, so the solve, the damping and the sensitivity analysis are plain numpy here.

    residual, jac = pyramid_residual(image, target, image_jac, levels=(0, 1))   # 0.5 |r|^2 = the image loss
    step = lm_step(jac, residual, damping=1e-3)                                  # solve (J^T J + l D) s = -J^T r
    w = huber_weights(residual, residual_scale(image.shape, (0, 1)), 0.01)       # robust: step on (w J, w r)
    report = identifiability(jac, scale=tolerances, floor=NOISE_FLOOR)            # which unknowns the image fixes

`pyramid_residual` weighs each level as `engine.kernels.image_loss` does (L2: 0.5 w d^2 over
3 n_l channel values, levels averaged), so 0.5 |r|^2 equals the renderer's own loss. The
pyramid is the 2x2 box average of `engine.kernels.image_loss.downsample`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# An 8-bit PNG step (1/255) in one channel of one pixel, squared: moving a parameter by its tolerance
# (the others re-fitted) must change the image by at least this much in sum of squares for the
# image to determine that parameter. Smaller changes are below what a picture of the scene can record.
NOISE_FLOOR = (1.0 / 255.0) ** 2


def box_halve(a: np.ndarray) -> np.ndarray:
    """(H, W, ...) -> (H // 2, W // 2, ...): the mean of each 2x2 block (the pyramid's downsample)."""
    h, w = a.shape[0] // 2, a.shape[1] // 2
    a = a[:2 * h, :2 * w]
    return 0.25 * (a[0::2, 0::2] + a[1::2, 0::2] + a[0::2, 1::2] + a[1::2, 1::2])


def pyramid_residual(image: np.ndarray, target: np.ndarray, jac: np.ndarray | None,
                     levels: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """The stacked residual of `levels` and, if `jac` is given, its Jacobian.

    Args:
        image, target: (H, W, 3) float arrays (linear RGB).
        jac: (H, W, 3, K) d image / d unknowns, or None (residual only).
        levels: pyramid levels in the residual (0 = full resolution, l = 2^l times coarser).
    Returns:
        r: (M,) float64 with 0.5 * r @ r == the mean of the levels' L2 losses; J: (M, K) float64 or None.
    """
    image, target = np.asarray(image, np.float64), np.asarray(target, np.float64)
    jac = None if jac is None else np.asarray(jac, np.float64)
    rs, js = [], []
    for level in range(max(levels) + 1):
        if level in levels:
            scale = np.sqrt(1.0 / (image[..., 0].size * 3 * len(levels)))
            rs.append(((image - target) * scale).reshape(-1))
            if jac is not None:
                js.append((jac * scale).reshape(-1, jac.shape[-1]))
        image, target = box_halve(image), box_halve(target)
        jac = None if jac is None else box_halve(jac)
    return np.concatenate(rs), (np.concatenate(js) if js else None)


def residual_scale(shape: tuple[int, ...], levels: tuple[int, ...]) -> np.ndarray:
    """(M,) the factor `pyramid_residual` applies to each entry (an image of shape (H, W, 3)): entry / factor is
    the pixel channel's difference in linear RGB."""
    return pyramid_residual(np.ones(shape), np.zeros(shape), None, levels)[0]


def huber_loss(residual: np.ndarray, scale: np.ndarray, threshold: float) -> float:
    """Huber's loss of the residual in pixel units (residual / scale), weighted back so that it equals
    0.5 |r|^2 wherever every |pixel difference| <= threshold: quadratic up to the threshold, linear beyond."""
    a = np.abs(residual) / scale
    return float((scale * scale * np.where(a <= threshold, 0.5 * a * a, threshold * (a - 0.5 * threshold))).sum())


def huber_weights(residual: np.ndarray, scale: np.ndarray, threshold: float) -> np.ndarray:
    """(M,) square roots of the iteratively-reweighted-least-squares weights of `huber_loss`: 1 up to the
    threshold, sqrt(threshold / |pixel difference|) beyond. A step on (w J, w r) is Gauss-Newton on the Huber
    loss (J^T w^2 r is its gradient), so a few pixels that a discrete choice in the render (an edge layer or a
    material switching) left far off cannot outweigh the thousands that move smoothly."""
    a = np.abs(residual) / scale
    return np.sqrt(np.where(a <= threshold, 1.0, threshold / np.maximum(a, 1e-300)))


def lm_step(jac: np.ndarray, residual: np.ndarray, damping: float) -> np.ndarray:
    """The Levenberg-Marquardt step s solving (J^T J + damping * diag(J^T J)) s = -J^T r.

    Marquardt's diagonal scaling makes the step independent of each unknown's units; a zero
    column (an unknown the residual does not see) gets a zero step rather than a singular solve.
    """
    h = jac.T @ jac
    g = jac.T @ residual
    diag = np.diag(h).copy()
    seen = diag > 1e-12 * max(float(diag.max(initial=0.0)), 1e-300)
    step = np.zeros(len(g))
    if seen.any():
        hs = h[np.ix_(seen, seen)] + damping * np.diag(diag[seen])
        step[seen] = -np.linalg.lstsq(hs, g[seen], rcond=None)[0]
    return step


@dataclass(frozen=True)
class Identifiability:
    """Per unknown: the sum-of-squares change of the image when it moves by its `scale` and every other
    unknown re-fits to hide the move (the Schur complement 1 / (H^-1)_ii of the scaled Gauss-Newton
    matrix H = (J S)^T (J S), computed as the squared residual of its column after least squares on the
    others); `determined` where that is at least `floor`."""
    sensitivity: np.ndarray  # (K,) the Schur complements, image sum of squares per scale^2
    alone: np.ndarray  # (K,) H_ii: the same change if no other unknown compensates
    determined: np.ndarray  # (K,) bool
    eigenvalues: np.ndarray  # (K,) of H, ascending
    floor: float
    robust: np.ndarray  # (K,) the same change as `sensitivity`, summed by Huber's loss (x2) with `threshold`


def identifiability(jac: np.ndarray, scale: np.ndarray, floor: float = NOISE_FLOOR,
                    threshold: float = np.inf) -> Identifiability:
    """Which unknowns the image determines, from its unweighted per-pixel Jacobian.

    Args:
        jac: (M, K) d image values / d unknowns (per pixel channel, not weighted by 1/n).
        scale: (K,) the size of a move that matters for each unknown (its tolerance).
        floor: the smallest image change (sum of squares) that a picture records.
        threshold: Huber's threshold for `robust` (per image value; infinite: robust == sensitivity).
    """
    js = np.asarray(jac, np.float64) * np.asarray(scale, np.float64)[None, :]
    h = js.T @ js
    alone = np.diag(h).copy()
    k = len(alone)
    sensitivity, robust = np.zeros(k), np.zeros(k)
    for i in np.flatnonzero(alone > 0.0):
        # what of column i the other columns cannot reproduce: least squares on J itself, not on H, whose
        # squared condition number would lose a nearly collinear pair to rounding
        others = np.delete(js, i, axis=1)
        if others.shape[1]:
            coef = np.linalg.lstsq(others, js[:, i], rcond=None)[0]
            rest = js[:, i] - others @ coef
        else:
            rest = js[:, i]
        sensitivity[i] = float(rest @ rest)
        robust[i] = 2.0 * huber_loss(rest, np.ones_like(rest), threshold)
    eigenvalues = np.linalg.eigvalsh(h) if k else np.zeros(0)
    return Identifiability(sensitivity=sensitivity, alone=alone, determined=sensitivity >= floor,
                           eigenvalues=eigenvalues, floor=floor, robust=robust)
