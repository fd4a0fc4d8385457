"""The differentiable render: every hand-written adjoint, the kinematics and the render's gradient
against float64 central differences on cpu and on vulkan (lavapipe); reproducibility; the soft
minimum at sharpness 1e4; the adjoint pairing itself."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from engine.autodiff.custom import adjoint_of, custom_adjoint, custom_adjoints
from engine.autodiff.gradcheck import finite_difference_gradient
from tests.conftest import CUDA, OTHER_ARCHS, backend_worker, fresh_worker

ARCHS = ["cpu", *OTHER_ARCHS]


def _call(arch: str, name: str, **inputs) -> dict:
    """Run computation `name` in this process (cpu) or in the arch's worker."""
    if arch == "cpu":
        from engine import backend, computations

        backend.init("cpu")
        return computations.run(name, **inputs)
    return backend_worker(arch).call(name, **inputs)


def _render_call(arch: str, name: str, **inputs) -> dict:
    """Run a computation of the differentiable renderer in this module's own worker on `arch` (`fresh_worker`).

    Its fields are that process's first: Taichi keys its offline cache by SNode ids, so only
    then do the renderer's kernels (minutes to compile) load from the cache of an earlier run."""
    return fresh_worker(arch).call(name, timeout_s=1800.0, **inputs)


# ---- the pairing --------------------------------------------------------------------------------
def test_every_custom_adjoint_is_declared_beside_its_forward_and_named_after_it():
    import engine.kernels.chamfer_terms  # noqa: F401  (declares its pair on import)
    import engine.kernels.image_loss  # noqa: F401
    import engine.kernels.reduce  # noqa: F401
    import engine.kernels.softmin  # noqa: F401
    import engine.kernels.straight_through  # noqa: F401

    pairs = custom_adjoints()
    for forward in ("chamfer_total", "broadcast_rows", "sum_into", "image_loss_terms", "soft_min_layers",
                    "substitute_image"):
        assert pairs.get(forward) == f"{forward}_adjoint", pairs
    from engine.kernels import image_loss, reduce, softmin

    for module, name in ((reduce, "broadcast_rows"), (reduce, "sum_into"), (image_loss, "image_loss_terms"),
                         (softmin, "soft_min_layers")):
        assert adjoint_of(getattr(module, name)) is getattr(module, f"{name}_adjoint")


def test_custom_adjoint_refuses_another_signature_and_a_second_adjoint():
    def forward(x, y):
        pass

    def adjoint(x, y):
        pass

    def wrong(x, z):
        pass

    with pytest.raises(TypeError, match="must take the parameters"):
        custom_adjoint(forward)(wrong)
    custom_adjoint(forward)(adjoint)
    assert adjoint_of(forward) is adjoint
    with pytest.raises(ValueError, match="already has a custom adjoint"):
        custom_adjoint(forward)(adjoint)


# ---- hand-written adjoints: image loss, fixed-order sums, broadcast, soft minimum ---------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_custom_adjoints_match_central_differences(arch):
    out = _call(arch, "adjoint_checks")
    f32 = arch == "vulkan"  # float32 there (no float64 exp/log in SPIR-V), float64 elsewhere
    value_tol, grad_tol = (2e-6, 2e-5) if f32 else (1e-12, 1e-7)
    for name in ("broadcast", "sum", "loss_l2", "loss_l1", "softmin"):
        assert np.abs(out[f"{name}_value"]).max() <= value_tol, name
        grad, fd = out[f"{name}_grad"], out[f"{name}_fd"]
        assert np.abs(grad - fd).max() <= grad_tol * max(1.0, np.abs(fd).max()), (name, grad, fd)
        assert np.abs(fd).max() > 0.05, name  # the check sees a real gradient


@pytest.mark.parametrize("arch", ARCHS)
def test_soft_minimum_is_stable_at_sharpness_1e4(arch):
    out = _call(arch, "soft_min_stability", kappa=1e4)
    ratios, soft, weight, grad = out["ratios"], out["soft_ratio"], out["weight"], out["ratio_grad"]
    assert np.isfinite(soft).all() and np.isfinite(weight).all() and np.isfinite(grad).all()
    lowest = ratios.min(axis=0)
    assert np.all(soft <= lowest + 1e-6 * np.maximum(1.0, lowest))
    assert np.all(soft >= lowest - np.log(2.0) / 1e4 - 1e-6 * np.maximum(1.0, lowest))
    np.testing.assert_allclose(weight.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(weight[-1], [0.5, 0.5], atol=1e-6)  # an exact tie splits evenly


# ---- the kinematics (Taichi's adjoint of straight-line code) --------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_device_kinematics_equal_the_host_packing_and_its_gradient_central_differences(arch):
    from app.scenes.robot_arm import scene_from_theta, theta_at
    from engine.kernels import raymarch
    from engine.render import Camera, pack64
    from engine.scene_theta import perturb

    rng = np.random.default_rng(3)
    theta = perturb(theta_at(0.5), {"joints": 30.0, "letter": 0.3, "letter_angles": 40.0, "albedo": 0.3, "sun": 20.0},
                    seed=5)
    weights = np.zeros(raymarch.N_PARAMS)
    weights[raymarch.P_BASE:] = rng.normal(size=raymarch.N_PARAMS - raymarch.P_BASE)
    weights[raymarch.P_PIXEL] = 0.0

    def host(th: np.ndarray) -> np.ndarray:  # the float64 host kinematics and packing
        return pack64(scene_from_theta(th), Camera(), 64, 32)

    out = _call(arch, "kinematics_check", theta=theta, weights=weights)
    scene = np.arange(raymarch.P_BASE, raymarch.N_PARAMS) != raymarch.P_PIXEL
    scene = np.nonzero(np.concatenate([np.zeros(raymarch.P_BASE, bool), scene]))[0]
    np.testing.assert_allclose(out["prm"][scene], host(theta)[scene], atol=2e-6)
    fd = finite_difference_gradient(lambda th: float(weights @ host(th)), theta, 1e-6)
    assert np.abs(fd).max() > 0.1
    np.testing.assert_allclose(out["grad"], fd, atol=5e-5 * np.abs(fd).max())


# ---- the render: the hit-point correction (Newton step), taps, shadows, shading, against the whole renderer ----
RENDER_COMPONENTS = [0, 1, 2, 3, 5, 8, 10, 16, 20]  # yaw, shoulder, elbow, wrist, tile_x, tile_yaw, paint_r, letter_r, sun_el
CLOSE_VIEW = {"azimuth": 10.0, "elevation": 25.0, "distance": 3.0}


@pytest.mark.parametrize("arch", ["cpu", pytest.param("vulkan", marks=pytest.mark.slow), CUDA])  # lavapipe: 12 s
def test_render_gradient_matches_central_differences_of_the_whole_renderer(arch):
    from app.claims.render_gradcheck import OFFSET, relative_errors
    from app.scenes.robot_arm import theta_at

    truth = theta_at(0.1)
    out = _render_call(arch, "render_gradcheck", t_theta=truth, theta=truth + OFFSET, width=160, height=80,
                components=np.array(RENDER_COMPONENTS), **CLOSE_VIEW)
    assert out["pixels"] > 3000 and out["arm_pixels"] > 30  # the arm's own shading is in the check
    rel = relative_errors(out["grad"], out["fd"])
    assert rel.max() <= 2e-2, (arch, out["grad"], out["fd"], rel)
    assert np.abs(out["fd"][:4]).min() > 0.0  # every joint moves something in the checked pixels


def test_loss_and_gradient_are_bit_identical_run_to_run():
    from app.claims.render_gradcheck import OFFSET
    from app.scenes.robot_arm import theta_at

    truth = theta_at(0.1)
    target = _render_call("cpu", "render_gradient", theta=truth, target=np.zeros((64, 128, 3), np.float32),
                          weight=np.ones((64, 128), np.float32), width=128, height=64)["image"]
    inputs = {"theta": truth + OFFSET, "target": target, "weight": np.ones((64, 128), np.float32), "width": 128,
              "height": 64}
    first = _render_call("cpu", "render_gradient", **inputs)
    second = _render_call("cpu", "render_gradient", **inputs)
    assert first["loss"] == second["loss"] and np.array_equal(first["grad"], second["grad"])
    assert np.array_equal(first["image"], second["image"])
    assert first["loss"] > 0.0 and np.abs(first["grad"]).max() > 0.0
    from engine.checks.render_checks import l2_loss  # the central differences' loss, on the host

    assert l2_loss(first["image"], target, inputs["weight"]) == pytest.approx(first["loss"], rel=1e-6)


def test_a_larger_views_gradient_never_survives_into_a_smaller_ones():
    """The tape zeroes only the rows of the renderer's gradients that a view used (Tape.used_rows): after a
    256x128 Jacobian, a 64x32 gradient is the same as before it, and a reset leaves every gradient field zero."""
    from app.scenes.robot_arm import theta_at

    out = _render_call("cpu", "gradients_after_views", theta=theta_at(0.4))
    assert out["first_loss"] == out["again_loss"] and np.array_equal(out["first"], out["again"])
    assert np.abs(out["first"]).max() > 0.0
    assert np.array_equal(out["left"], np.zeros_like(out["left"])), out["left"]


@pytest.mark.parametrize("arch", ARCHS)
def test_a_pyramid_loss_leaves_the_renderer_as_it_was(arch):
    """A 4-level pyramid evaluation must not change the next full-resolution one. Regression: with the
    renderer's fields in one 200 MB group, lavapipe wrapped the last ones onto the first (the pyramid's
    partial sums overwrote the camera's pixel size), so every later render was wrong, silently."""
    from app.claims.render_gradcheck import OFFSET
    from app.scenes.robot_arm import theta_at

    truth = theta_at(0.1)
    target = _render_call(arch, "render_gradient", theta=truth, target=np.zeros((64, 128, 3), np.float32),
                          weight=np.ones((64, 128), np.float32), width=128, height=64)["image"]
    inputs = {"theta": truth + OFFSET, "target": target, "weight": np.ones((64, 128), np.float32), "width": 128,
              "height": 64}
    first = _render_call(arch, "render_gradient", **inputs)
    pyramid = _render_call(arch, "render_gradient", levels=4, **inputs)
    again = _render_call(arch, "render_gradient", **inputs)
    assert pyramid["loss"] != first["loss"]
    assert first["loss"] == again["loss"] and np.array_equal(first["grad"], again["grad"])


def test_a_field_group_beyond_one_vulkan_storage_buffer_is_refused():
    backend_worker("vulkan")  # skips (or fails in CI) as the suite does without Vulkan
    code = ("from engine import backend; backend.init('vulkan')\n"
            "import taichi as ti\nfrom engine.fields import FieldGroup, VULKAN_MAX_BYTES\n"
            "g = FieldGroup(); g.field(ti.f32, (VULKAN_MAX_BYTES // 4,)); g.finalize()\n"
            "g = FieldGroup(); g.field(ti.f32, (VULKAN_MAX_BYTES // 8 + 1,), needs_grad=True); g.finalize()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "UserError: a field group of 128.0 MiB is more than one Vulkan storage " \
                                      "buffer" in result.stderr, result.stderr[-2000:]


def test_differentiable_image_is_close_to_the_forward_renderers():
    """The same scene from both renderers: they differ only where the differentiable one is softer
    (hit-to-hit silhouettes are blended, shadows use the refined closest approach)."""
    from app.scenes.robot_arm import theta_at

    diff = _render_call("cpu", "render_gradient", theta=theta_at(0.1), target=np.zeros((64, 128, 3), np.float32),
                        weight=np.ones((64, 128), np.float32), width=128, height=64)["image"]
    forward = _render_call("cpu", "raymarch_frame", t=0.1, width=128, height=64)["rgb"]
    err = np.abs(diff - forward).max(axis=-1)
    assert np.mean(err < 1e-2) > 0.85 and err.mean() < 0.02, (np.mean(err < 1e-2), err.mean())


@pytest.mark.parametrize("arch", ARCHS)
def test_comparing_the_forward_image_removes_the_floor_under_a_png_and_keeps_the_differentiable_gradient(arch):
    """A PNG written by the forward renderer, compared with the forward renderer's image of theta
    (DiffRenderer.set_compare("forward")): at the true pose the loss is the PNG's 8-bit rounding alone, where
    the differentiable render's own image leaves a floor; and away from it the gradient is exactly the
    differentiable render's Jacobian applied to the forward residual F - T (the same as comparing the
    differentiable image D with the target D - (F - T)), whose agreement with central differences the
    gradcheck above checks on each backend."""
    from app.claims.render_gradcheck import OFFSET
    from app.scenes.robot_arm import theta_at
    from engine.image_io import linear_from_srgb8, srgb8

    width, height = 128, 64
    png = linear_from_srgb8(srgb8(_call("cpu", "raymarch_frame", t=0.1, width=width, height=height)["rgb"]))
    ones = np.ones((height, width), np.float32)
    truth = theta_at(0.1)
    own = _render_call(arch, "render_gradient", theta=truth, target=png, weight=ones, width=width, height=height)
    matched = _render_call(arch, "render_gradient", theta=truth, target=png, weight=ones, width=width, height=height,
                           compare="forward")
    assert own["loss"] > 1e-4 and matched["loss"] < 2e-6, (own["loss"], matched["loss"])
    away = _render_call(arch, "render_gradient", theta=truth + OFFSET, target=png, weight=ones, width=width,
                        height=height, compare="forward")
    shifted = away["diff_image"] - (away["image"] - png)
    same = _render_call(arch, "render_gradient", theta=truth + OFFSET, target=shifted, weight=ones, width=width,
                        height=height)
    assert np.abs(away["grad"]).max() > 0.0 and away["loss"] > 100.0 * matched["loss"]
    np.testing.assert_allclose(away["grad"], same["grad"], rtol=0.0, atol=1e-4 * np.abs(same["grad"]).max())


def test_packets_march_and_hold_as_one_ray_per_thread_does():
    """The cpu's packets (engine.kernels.lanes: march_pixels, hold) and one pixel or slot per thread give the same
    image, held samples and gradient, bit for bit: 61 columns (a partly filled last packet in every row), edge
    layers and shadowed slots (golden-section searches in packets)."""
    from app.scenes.robot_arm import theta_at

    out = _render_call("cpu", "packets_vs_one_ray", theta=theta_at(0.5))
    assert out["lanes"] > 1
    for key in ("image", "loss", "grad", "t", "shadow", "values", "points"):
        assert np.array_equal(out[f"one_{key}"], out[f"packets_{key}"]), key
    assert (out["one_shadow"] > 0.0).sum() > 10 and out["n_slots"] > 61 * 40 // 2  # shadows, edge layers


@pytest.mark.parametrize("arch", ARCHS)
def test_a_view_in_bands_renders_and_differentiates_as_one_band_does(arch):
    """A view rendered band after band (engine.diff_render: the fields hold one band; here bands of 8 rows, the
    last of 4) gives the same image, image Jacobian and edge mask as the whole view at once, bit for bit (every
    pixel's work is the same), and the same loss and gradient but for the order of the sums across bands: within
    1e-12 (the float64 loss) and 1e-6 of the largest component (the float32 gradient), over a 3-level pyramid and
    against the forward renderer's image."""
    from app.scenes.robot_arm import theta_at

    out = _render_call(arch, "bands_vs_one_band", theta=theta_at(0.6))
    assert out["one_count"] == 1 and out["bands_count"] == 5
    for key in ("image", "jacobian_image", "jacobian", "edges"):
        assert np.array_equal(out[f"one_{key}"], out[f"bands_{key}"]), key
    assert out["one_edges"].sum() > 20  # silhouettes cross the bands' edges
    for kind in ("", "forward_"):
        assert abs(out[f"bands_{kind}loss"] - out[f"one_{kind}loss"]) <= 1e-12 * out[f"one_{kind}loss"], kind
        grad, band_grad = out[f"one_{kind}grad"], out[f"bands_{kind}grad"]
        assert np.abs(band_grad - grad).max() <= 1e-6 * np.abs(grad).max(), kind


def test_a_band_is_every_row_of_a_view_up_to_band_pixels_else_whole_multiples_of_band_align():
    from engine.diff_render import BAND_ALIGN, BAND_PIXELS, band_rows, slot_capacity

    assert BAND_PIXELS == 256 * 128 and BAND_ALIGN == 8
    assert [band_rows(w, h) for w, h in ((256, 128), (512, 256), (1024, 512), (2048, 1024), (300, 150))] == \
        [128, 64, 32, 16, 104]
    assert band_rows(64, 40, 64 * 8) == 8 and band_rows(64, 40, 10) == 8  # at least BAND_ALIGN rows
    # a band's slots: a hit per pixel of the band, the view's edge layers (a band has no more than its view)
    assert slot_capacity(1024, 512, 128) == 1024 * 128 + 48 * (1024 + 512)
    assert slot_capacity(256, 128) == 256 * 128 + 48 * (256 + 128)
