"""Claim `render_gradcheck`: the image loss's gradient in every theta component against central differences.

The differentiable render (engine.diff_render) of the timeline's frame at T, at 256x128,
with theta moved off the target so the loss has a gradient. The L2 loss is taken over
the pixels where the image is smooth in theta (`engine.checks.render_checks.smooth_mask`: hits away
from silhouettes, material seams, creases, grazing angles and ambient occlusion), and its
taped gradient is compared with central differences of the whole renderer (march, hold,
shade) rendered from scratch at theta +- h, its L2 loss taken in float64 and differenced (the
renderer runs in float32; each difference is the median of those at h/3, h and 3h; one render per
step serves every mask below: `engine.checks.render_checks.finite_differences`). Goal: relative error <= 1e-2 in
every component; a component whose gradient is below 1 % of the largest (a sum of
contributions that nearly cancel) is compared absolutely, against 1e-4 of the largest.
The silhouette term (the edge band, `edge_mask`) is reported separately, and so, over the
geometric components and the sun, are the pixels left out for their ambient occlusion (held
constant: what holding it costs, `ao_mask`) and the smooth pixels whose shadow ray passes an
occluder (`shadow_mask`).
"""
from __future__ import annotations

import numpy as np

from engine.scene_theta import NAMES

T, WIDTH, HEIGHT = 0.1, 256, 128
RTOL = 1e-2
OFFSET = np.array([0.01, 0.01, -0.01, 0.01, 0.005, 0.01, 0.01, 0.01, 0.01, 0.01] + [0.0] * 9 + [0.02, 0.02])
ALBEDO_SCALE = 1.05
HELD_COMPONENTS = list(range(10)) + [19, 20]  # the geometric components and the sun


def relative_errors(analytic: np.ndarray, numeric: np.ndarray) -> np.ndarray:
    """|a - n| / max(|n|, 1e-2 max |n|) per component."""
    floor = 1e-2 * float(np.abs(numeric).max())
    return np.abs(analytic - numeric) / np.maximum(np.abs(numeric), floor)


def gradcheck_masks(r, target: np.ndarray, theta: np.ndarray, masks: dict[str, np.ndarray],
                    components: dict[str, list[int]]) -> dict[str, tuple]:
    """Per mask: (analytic gradient, central differences, relative errors) over that mask's `components`;
    the central differences of every mask from one render per step (`finite_differences`)."""
    from engine.checks.render_checks import finite_differences

    every = sorted(set().union(*components.values()))
    r.set_theta(theta)
    numeric = finite_differences(r, target, masks, every)
    out = {}
    for name, mask in masks.items():
        index = components[name]
        r.set_theta(theta)
        r.set_target(target, mask.astype(np.float32))
        _, grad = r.loss_and_gradient()
        out[name] = (grad[index], numeric[name][index], relative_errors(grad[index], numeric[name][index]))
    return out


def run(ctx) -> None:
    from app.scenes.inverse_render import render_target, renderer
    from app.scenes.robot_arm import theta_at
    from engine.checks.render_checks import ao_mask, shadow_mask, smooth_mask
    from engine.diff_render import edge_mask

    truth = theta_at(T)
    target = render_target(truth, WIDTH, HEIGHT)
    theta = truth + OFFSET
    theta[10:19] *= ALBEDO_SCALE
    r = renderer()
    r.set_theta(theta)
    r.render()
    smooth, edges, occluded, shadowed = smooth_mask(r), edge_mask(r), ao_mask(r), shadow_mask(r)
    every = list(range(len(NAMES)))
    results = gradcheck_masks(r, target, theta, {"smooth": smooth, "silhouette": edges, "ao": occluded,
                                                 "shadow": shadowed},
                              {"smooth": every, "silhouette": every, "ao": HELD_COMPONENTS,
                               "shadow": HELD_COMPONENTS})
    grad, numeric, rel = results["smooth"]
    worst = int(np.argmax(rel))
    own = np.abs(grad - numeric) / np.maximum(np.abs(numeric), 1e-300)
    ctx.metric(t=T, width=WIDTH, height=HEIGHT, smooth_pixels=int(smooth.sum()), silhouette_pixels=int(edges.sum()),
               smooth_rel_err={n: float(e) for n, e in zip(NAMES, rel)},
               smooth_own_rel_err={n: float(e) for n, e in zip(NAMES, own)},
               smooth_analytic={n: float(g) for n, g in zip(NAMES, grad)},
               smooth_numeric={n: float(g) for n, g in zip(NAMES, numeric)})
    ctx.check(bool(np.all(rel <= RTOL)), f"render gradcheck on {ctx.arch}, {smooth.sum()} smooth pixels at "
                                         f"{WIDTH}x{HEIGHT}: max relative error {rel.max():.2e} ({NAMES[worst]}) over "
                                         f"all {len(NAMES)} components (goal <= {RTOL:g})")
    g_e, n_e, rel_e = results["silhouette"]
    ctx.metric(silhouette_rel_err={n: float(e) for n, e in zip(NAMES, rel_e)},
               silhouette_analytic={n: float(g) for n, g in zip(NAMES, g_e)},
               silhouette_numeric={n: float(g) for n, g in zip(NAMES, n_e)})
    joints = rel_e[:5]
    print(f"  silhouette term ({edges.sum()} edge pixels), reported: relative error of the geometric components "
          f"median {np.median(rel_e[:10]):.2e}, max {rel_e[:10].max():.2e} ({NAMES[int(np.argmax(rel_e[:10]))]}); "
          f"arm joints {', '.join(f'{e:.1e}' for e in joints)}", flush=True)
    # what the held terms cost, reported: the pixels left out for their ambient occlusion (held constant),
    # and the smooth pixels whose shadow is differentiated through its held closest approach
    names = [NAMES[i] for i in HELD_COMPONENTS]
    for label, key, mask in (("ambient occlusion held", "ao", occluded), ("shadows", "shadow", shadowed)):
        g_h, n_h, rel_h = results[key]
        ctx.metric(**{f"{key}_pixels": int(mask.sum()), f"{key}_rel_err": dict(zip(names, map(float, rel_h))),
                      f"{key}_analytic": dict(zip(names, map(float, g_h))),
                      f"{key}_numeric": dict(zip(names, map(float, n_h)))})
        print(f"  {label} ({mask.sum()} pixels), reported: relative error median {np.median(rel_h):.2e}, max "
              f"{rel_h.max():.2e} ({names[int(np.argmax(rel_h))]}) over {len(names)} components", flush=True)
