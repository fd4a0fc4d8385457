"""A soft minimum over the edge layers of each pixel: log-sum-exp with the minimum subtracted.

A ray can pass close to two occluders before it hits (or misses) (a finger in front
of the forearm, the arm's edge in front of a tile's). The differentiable renderer keeps
the ray's K deepest local closest approaches as "edge layers", each with its distance
ratio r_k (distance / pixel footprint) and its shaded colour c_k, and combines them with

    r = softmin_k(r_k) = m - log(sum_k exp(-kappa (r_k - m))) / kappa,   m = min_k r_k
    c = sum_k w_k c_k,   w_k = exp(-kappa (r_k - m)) / sum_j exp(-kappa (r_j - m))

so the pixel's coverage (from r) and occluder colour (c) move smoothly when the nearest
occluder changes. Subtracting m keeps every exponent <= 0: no overflow at any sharpness
(tested at kappa = 1e4) and the largest term is exactly 1, so the log never sees 0.
Inactive layers (no edge) count as r_k = INACTIVE_RATIO, which gets zero weight.

`soft_min_layers` computes r, c and the weights w in one pass; its declared adjoint
uses the stored weights: dr/dr_k = w_k, dc/dr_k = kappa w_k (c - c_k), dc/dc_k = w_k.
The kernels work on f32 or f64 fields (f64 for gradchecks).
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint

INACTIVE_RATIO = 1e6


@ti.kernel
def soft_min_layers(ratio: ti.template(), colour: ti.template(), active: ti.template(), n_px: ti.i32,
                    kappa: ti.f64, soft_ratio: ti.template(), soft_colour: ti.template(), weight: ti.template()):
    """Per pixel px < n_px over layers k = 1..K (slots k * n_px + px of ratio/colour/active; K = weight.shape[1])."""
    for px in range(n_px):
        k_ = ti.cast(kappa, soft_ratio.dtype)
        r = ti.Vector([ti.cast(INACTIVE_RATIO, soft_ratio.dtype)] * weight.shape[1])
        for k in ti.static(range(weight.shape[1])):
            if active[(k + 1) * n_px + px] != 0:
                r[k] = ratio[(k + 1) * n_px + px]
        m = r.min()
        e = ti.exp(-k_ * (r - m))  # every exponent <= 0, the largest exactly 0
        z = e.sum()
        c = ti.Vector.zero(soft_ratio.dtype, 3)
        for k in ti.static(range(weight.shape[1])):
            weight[px, k] = e[k] / z
            if active[(k + 1) * n_px + px] != 0:
                c += e[k] / z * colour[(k + 1) * n_px + px]
        soft_ratio[px] = m - ti.log(z) / k_
        soft_colour[px] = c


@custom_adjoint(soft_min_layers)
@ti.kernel
def soft_min_layers_adjoint(ratio: ti.template(), colour: ti.template(), active: ti.template(), n_px: ti.i32,
                            kappa: ti.f64, soft_ratio: ti.template(), soft_colour: ti.template(),
                            weight: ti.template()):
    """Gradients of the active layers' ratios and colours from those of r and c, with the stored weights."""
    for px in range(n_px):
        k_ = ti.cast(kappa, soft_ratio.dtype)
        g_r = soft_ratio.grad[px]
        g_c = soft_colour.grad[px]
        c = soft_colour[px]
        for k in ti.static(range(weight.shape[1])):
            slot = (k + 1) * n_px + px
            if active[slot] != 0:
                w = weight[px, k]
                ratio.grad[slot] += w * g_r + k_ * w * (c - colour[slot]).dot(g_c)
                colour.grad[slot] += w * g_c
