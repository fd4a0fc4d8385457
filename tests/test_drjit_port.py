"""The Dr.Jit port of the differentiable render (bench/drjit_render.py, the `bench invert` peer) renders the same
image and the same gradient as ours, at 64x32, with the benchmark's own tolerances (`bench.invert.compare`).

Skipped when drjit (the `bench` extra) or an LLVM it can use (>= 16) is missing. Ours runs in a cpu worker of
its own whose first fields are the shared 512x256 renderer, so its kernels load from the offline cache that
tests/test_diff_render.py fills (Taichi keys the cache by SNode ids)."""
from __future__ import annotations

import numpy as np
import pytest

try:
    from bench import drjit_render
except ImportError as exc:  # drjit not installed, or no usable libLLVM
    pytest.skip(f"the Dr.Jit port needs drjit with an LLVM >= 16: {exc}", allow_module_level=True)

from bench.invert import compare, describe, start_theta
from engine.worker import BackendWorker

WIDTH, HEIGHT = 64, 32


@pytest.fixture(scope="module")
def ours() -> dict:
    """Our target (the render at theta*) and our loss, gradient and image at the perturbed theta."""
    truth, theta = start_theta()
    worker = BackendWorker("cpu")
    try:
        blank = np.zeros((HEIGHT, WIDTH, 3), np.float32)
        ones = np.ones((HEIGHT, WIDTH), np.float32)
        target = worker.call("render_gradient", theta=truth, target=blank, weight=ones, width=WIDTH, height=HEIGHT,
                             timeout_s=1800.0)["image"]
        out = worker.call("render_gradient", theta=theta, target=target, weight=ones, width=WIDTH, height=HEIGHT,
                          timeout_s=1800.0)
    finally:
        worker.close()
    return {"target": target, "theta": theta, "truth": truth, **out}


def _peer(ours: dict) -> drjit_render.DrJitRenderer:
    from engine.render import Camera, camera_params

    peer = drjit_render.DrJitRenderer(edge_px=1.0)
    peer.set_view(camera_params(Camera(), WIDTH, HEIGHT).astype(np.float32), WIDTH, HEIGHT)
    peer.set_target(ours["target"])
    return peer


def test_the_port_renders_our_image_and_gradient(ours):
    peer = _peer(ours)
    target = peer.render(ours["truth"])
    assert np.abs(target - ours["target"]).max() <= 0.05
    loss, grad = peer.loss_and_gradient(ours["theta"])
    c = compare(ours, {"loss": loss, "grad": grad, "image": peer._numpy(peer.last_image)})
    assert c["ok"], describe(c)
    assert loss > 1e-5 and np.abs(grad).max() > 1e-4  # the comparison is not of two zeros


def test_the_port_gradient_is_not_our_gradient_of_another_theta(ours):
    """The comparison can fail: the same port one joint degree off disagrees."""
    peer = _peer(ours)
    moved = ours["theta"].copy()
    moved[1] += np.radians(1.0)
    loss, grad = peer.loss_and_gradient(moved)
    assert not compare(ours, {"loss": loss, "grad": grad, "image": peer._numpy(peer.last_image)})["ok"]
