"""Checks of the differentiable render: where its image is smooth in theta, finite differences, the gradchecks.

The masks say which pixels a central difference can be compared on (`smooth_mask`: no silhouette, seam,
crease, grazing hit or ambient occlusion beside them); `finite_differences` are the L2 loss's central
differences in theta under several pixel weightings from one render per step, robust to a discrete choice
flipping inside a step; the named computations "render_gradcheck" and
"render_jacobian" (engine.computations) run them on any backend, for the claims render_gradcheck and
render_grad_parity and for tests/test_diff_render.py.
"""
from __future__ import annotations

import numpy as np

from engine.diff_render import BAND_ALIGN, DiffRenderer, edge_mask, held_layers, per_pixel_slot, shared_renderer
from engine.kernels import raymarch
from engine.kernels.kinematics import N_THETA
from engine.render import Camera

FD_STEPS = {"angle": 1e-3, "position": 1e-3, "albedo": 1e-3}  # central-difference steps per kind of component
CREASE_COS = 0.94  # neighbouring normals closer than ~20 degrees: no crease between them
MIN_FACING = 0.2  # |normal . ray| above this: not a grazing hit


def _neighbours(a: np.ndarray) -> list[np.ndarray]:
    """a shifted by each of the 8 neighbour offsets (edge-padded), for per-pixel neighbourhood tests."""
    p = np.pad(a, [(1, 1), (1, 1)] + [(0, 0)] * (a.ndim - 2), mode="edge")
    h, w = a.shape[:2]
    return [p[1 + dy:1 + dy + h, 1 + dx:1 + dx + w] for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]


def view_rays(r: DiffRenderer) -> np.ndarray:
    """Unit ray direction of every pixel of the current view (height, width, 3), as `raymarch.primary_ray`."""
    cam = r.cam.to_numpy().astype(np.float64)
    u = (np.arange(r.width) + 0.5) / r.width * 2.0 - 1.0
    v = 1.0 - (np.arange(r.height) + 0.5) / r.height * 2.0
    rays = cam[9:12] + cam[3:6] * u[None, :, None] + cam[6:9] * v[:, None, None]
    return rays / np.linalg.norm(rays, axis=-1, keepdims=True)


def smooth_mask(r: DiffRenderer, with_ao: bool = False) -> np.ndarray:
    """Pixels where the image is smooth in theta at the last evaluation (bool (height, width)).

    A hit with no silhouette at or beside it, the same material as its 8 neighbours and no crease
    between them (normals within ~20 degrees), not grazing, and no ambient occlusion (held constant,
    so its variation is not in the gradient; `with_ao` keeps occluded pixels, to measure what holding
    it costs). Material seams (a letter on its tile), creases (a box's edges) and silhouettes change a
    pixel discontinuously or carry no implicit gradient."""
    layers = held_layers(r)
    hit, mat, normal = layers["active"][0], layers["material"][0], layers["normal"][0]
    edge = layers["covering"].any(axis=0)
    ok = hit if with_ao else hit & (layers["ao"][0] >= 0.9999)
    for e, m, n in zip(_neighbours(edge), _neighbours(mat), _neighbours(normal)):
        ok &= ~e & (m == mat) & ((n * normal).sum(-1) > CREASE_COS)
    ok &= np.abs((normal * view_rays(r)).sum(-1)) > MIN_FACING
    return ok & ~edge


def ao_mask(r: DiffRenderer) -> np.ndarray:
    """Pixels smooth in theta but for their ambient occlusion (< 1, held constant): bool (height, width)."""
    return smooth_mask(r, with_ao=True) & ~smooth_mask(r)


def shadow_mask(r: DiffRenderer) -> np.ndarray:
    """Smooth pixels whose shadow ray passes an occluder within twice the penumbra (their shadow term is
    differentiated through the held closest approach): bool (height, width)."""
    held = per_pixel_slot(r, r.held_shadow.to_numpy())[0][:r.n_px].reshape(r.height, r.width)
    return smooth_mask(r) & (held > 0.0)


def fd_step(index: int) -> float:
    from engine.scene_theta import group_of

    group = group_of(index)
    return FD_STEPS["albedo"] if group == "albedo" else FD_STEPS["position"] if group in ("gripper", "letter") \
        else FD_STEPS["angle"]


FD_SCALES = (1.0 / 3.0, 1.0, 3.0)


def l2_loss(image: np.ndarray, target: np.ndarray, weight: np.ndarray) -> float:
    """The renderer's L2 image loss (`engine.kernels.image_loss`: the mean over pixels and channels of
    0.5 w |image - target|^2, one pyramid level) in float64 on the host."""
    d = image.astype(np.float64) - target
    return float(0.5 * (weight[..., None] * d * d).sum() / (3 * weight.size))


def finite_differences(r: DiffRenderer, target: np.ndarray, weights: dict[str, np.ndarray],
                       components: list[int] | None = None) -> dict[str, np.ndarray]:
    """Central differences in theta of the L2 loss against `target` under each of several pixel weightings:
    {name: (N_THETA,) float64}, zero outside `components` (default: all).

    Each theta is rendered once (the whole renderer: march, hold, shade, compose) and every weighting's loss
    taken from that image in float64 (`l2_loss`); each step is taken as the float32 values actually set. The
    renderer holds a few discrete choices (which march step brackets a closest approach, a bound or a surface
    at a shadow sample) that can flip inside a step and put a small jump into one difference; the estimate is
    the median of the central differences at h/3, h and 3h (FD_SCALES), which a jump in one of them does not
    move."""
    base = r.theta_values()
    target = np.asarray(target, np.float64)
    out = {name: np.zeros(N_THETA) for name in weights}
    for i in range(N_THETA) if components is None else components:
        estimates = {name: [] for name in weights}
        for scale in FD_SCALES:
            plus, minus = base.copy(), base.copy()
            plus[i] += fd_step(i) * scale
            minus[i] -= fd_step(i) * scale
            plus32, minus32 = plus.astype(np.float32), minus.astype(np.float32)
            r.set_theta(plus32)
            high = r.render()
            r.set_theta(minus32)
            low = r.render()
            step = float(plus32[i]) - float(minus32[i])
            for name, weight in weights.items():
                estimates[name].append((l2_loss(high, target, weight) - l2_loss(low, target, weight)) / step)
        for name in weights:
            out[name][i] = float(np.median(estimates[name]))
    r.set_theta(base)
    return out


def run_render_jacobian(theta: np.ndarray, target: np.ndarray, width: int, height: int, max_width: int = 512,
                        max_height: int = 256) -> dict:
    """The computation "render_jacobian": the image Jacobian (`DiffRenderer.image_jacobian`) at theta, its
    contraction with the L2 loss's image gradient ("contracted", which must equal "grad", the tape's own
    d loss / d theta), and central differences of the image in theta ("fd", float64 steps as set in float32)
    with the pixels where the image is smooth in theta ("smooth")."""
    r = shared_renderer(max_width, max_height)
    r.set_view(Camera(), int(width), int(height))
    r.set_loss("l2", 1, 1.0)
    r.set_theta(theta)
    r.set_target(target)
    image, jac = r.image_jacobian()
    smooth = smooth_mask(r)
    loss, grad = r.loss_and_gradient()
    dloss = (image.astype(np.float64) - np.asarray(target, np.float64)) / (3.0 * r.n_px)  # d(0.5 mean d^2)/d image
    fd = np.zeros_like(jac)
    base = np.asarray(theta, np.float64)
    for i in range(N_THETA):
        plus, minus = base.copy(), base.copy()
        plus[i] += fd_step(i)
        minus[i] -= fd_step(i)
        plus32, minus32 = plus.astype(np.float32), minus.astype(np.float32)
        r.set_theta(plus32)
        high = r.render().astype(np.float64)
        r.set_theta(minus32)
        low = r.render().astype(np.float64)
        fd[..., i] = (high - low) / (float(plus32[i]) - float(minus32[i]))
    r.set_theta(base)
    return {"jac": jac, "contracted": np.einsum("hwc,hwck->k", dloss, jac), "grad": grad, "loss": np.float64(loss),
            "fd": fd, "smooth": smooth, "image": image}


def run_render_gradcheck(t_theta: np.ndarray, theta: np.ndarray, width: int, height: int,
                         components: np.ndarray, azimuth: float = Camera.azimuth, elevation: float = Camera.elevation,
                         distance: float = Camera.distance, max_width: int = 512, max_height: int = 256) -> dict:
    """The parity computation "render_gradcheck": on this backend, render the target at `t_theta`, then at
    `theta` the taped gradient of the loss over the smooth pixels (`smooth_mask`) and central differences
    of the whole renderer for the given components; `arm_pixels` counts smooth pixels on the arm."""
    r = shared_renderer(max_width, max_height)
    r.set_view(Camera(azimuth=float(azimuth), elevation=float(elevation), distance=float(distance)), int(width),
               int(height))
    r.set_loss("l2", 1, 1.0)
    r.set_theta(t_theta)
    target = r.render()
    r.set_theta(theta)
    r.render()
    mask = smooth_mask(r)
    r.set_target(target, mask.astype(np.float32))
    _, grad = r.loss_and_gradient()
    numeric = finite_differences(r, target, {"smooth": mask}, [int(i) for i in components])["smooth"]
    arm = np.isin(held_layers(r)["material"][0], [raymarch.M_PAINT, raymarch.M_JOINT, raymarch.M_STEEL])
    return {"grad": grad[components], "fd": numeric[components], "pixels": np.int64(mask.sum()),
            "arm_pixels": np.int64((mask & arm).sum())}


def run_gradients_after_views(theta: np.ndarray, small: tuple = (64, 32), large: tuple = (256, 128),
                              max_width: int = 512, max_height: int = 256) -> dict:
    """The computation "gradients_after_views": the tape zeroes only the rows a view used (`Tape.used_rows`), so
    a larger view's gradient must not survive into a smaller one's. At the `small` view: loss and gradient ("first");
    at the `large` view an image Jacobian and a loss gradient; an untaped render of a view smaller still (it rewrites
    the slot count on the device with fewer slots than the tape used: the zeroing must still cover the tape's); at
    `small` again ("again", which must equal "first" bit for bit); then a reset, after which "left" (the largest
    |gradient| of each of the renderer's gradient fields, over the whole field) must be all 0."""
    r = shared_renderer(max_width, max_height)

    def gradient(width: int, height: int) -> tuple:
        r.set_view(Camera(), int(width), int(height))
        r.set_loss("l2", 1, 1.0)
        r.set_theta(theta)
        r.set_target(np.zeros((int(height), int(width), 3), np.float32))
        return r.loss_and_gradient()

    first_loss, first = gradient(*small)
    gradient(*large)
    r.image_jacobian()
    r.set_view(Camera(), int(small[0]) // 2, int(small[1]) // 2)
    r.render()
    again_loss, again = gradient(*small)
    r.tape.reset()
    fields = [r.theta, r.theta_slots, r.points, r.values, r.colour, r.ratio, r.soft_ratio, r.soft_colour,
              r.diff_image, *r.images, *r.terms, r.loss]
    left = np.array([float(np.abs(f.grad.to_numpy()).max()) for f in fields])
    return {"first": first, "again": again, "first_loss": np.float64(first_loss), "again_loss": np.float64(again_loss),
            "left": left}


def run_packets_vs_one_ray(theta: np.ndarray, width: int = 61, height: int = 40, max_width: int = 512,
                           max_height: int = 256) -> dict:
    """The computation "packets_vs_one_ray": the shared renderer's image, loss, gradient and held samples with its
    march and hold one pixel or slot per thread ("one_*") and in the backend's packets ("packets_*",
    `engine.kernels.lanes`), at theta against 0.9 x its own image; "n_slots", "lanes"."""
    r = shared_renderer(max_width, max_height)
    packets = r.lanes
    out = {"lanes": np.int64(packets)}
    try:
        for name, lanes in (("one", 1), ("packets", packets)):
            r.lanes = lanes
            r.set_view(Camera(), int(width), int(height))
            r.set_loss("l2", 1, 1.0)
            r.set_theta(theta)
            image = r.render()
            r.set_target(0.9 * image)
            loss, grad = r.loss_and_gradient()
            n = r.n_slots
            out.update({f"{name}_image": image, f"{name}_loss": np.float64(loss), f"{name}_grad": grad,
                        f"{name}_t": r.held_t.to_numpy()[:n], f"{name}_shadow": r.held_shadow.to_numpy()[:n],
                        f"{name}_values": r.values.to_numpy()[:n], f"{name}_points": r.points.to_numpy()[:n]})
            out["n_slots"] = np.int64(n)
    finally:
        r.lanes = packets
    return out


def run_bands_vs_one_band(theta: np.ndarray, width: int = 61, height: int = 36, max_width: int = 512,
                          max_height: int = 256) -> dict:
    """The computation "bands_vs_one_band": the shared renderer's view rendered whole ("one_*") and in bands of
    BAND_ALIGN rows ("bands_*", the last one partly filled when height is not a multiple): the image, the loss
    and gradient of a 3-level pyramid L2 loss against 0.9 x the image and of the same against the forward
    renderer's image (`set_compare("forward")`), the image Jacobian and the edge mask at theta; "bands"."""
    r = shared_renderer(max_width, max_height)
    whole = r.band_pixels
    out = {}
    try:
        for name, pixels in (("one", whole), ("bands", BAND_ALIGN * int(width))):
            r.band_pixels = pixels
            r.set_view(Camera(), int(width), int(height))
            r.set_theta(theta)
            image = r.render()
            r.set_target(0.9 * image)
            r.set_loss("l2", 3, 1.5)
            loss, grad = r.loss_and_gradient()
            r.set_compare("forward")
            forward_loss, forward_grad = r.loss_and_gradient()
            r.set_compare("diff")
            r.set_loss("l2", 1, 1.0)
            jac_image, jac = r.image_jacobian()
            out.update({f"{name}_image": image, f"{name}_loss": np.float64(loss), f"{name}_grad": grad,
                        f"{name}_forward_loss": np.float64(forward_loss), f"{name}_forward_grad": forward_grad,
                        f"{name}_jacobian_image": jac_image, f"{name}_jacobian": jac, f"{name}_edges": edge_mask(r)})
            out[f"{name}_count"] = np.int64(len(r.bands()))
    finally:
        r.band_pixels = whole
    return out
