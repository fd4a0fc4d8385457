"""The Dr.Jit port of the differentiable render (bench/drjit_render.py, the `bench invert` peer) renders the same
image and the same gradient as ours, at 64x32, with the benchmark's own tolerances (`bench.invert.compare`: the
gradient over pixels farther than 2 pixels from a silhouette within 5e-3, over the band within 2e-1).

Skipped when drjit (the `bench` extra) or an LLVM it can use (>= 16) is missing. Ours runs in a cpu worker of
its own whose first fields are the shared 512x256 renderer, so its kernels load from the offline cache that
tests/test_diff_render.py fills (Taichi keys the cache by SNode ids)."""
from __future__ import annotations

import numpy as np
import pytest

try:
    from bench import drjit_render  # noqa: F401 (imported to learn whether drjit and its LLVM load)
except ImportError as exc:  # drjit not installed, or no usable libLLVM
    pytest.skip(f"the Dr.Jit port needs drjit with an LLVM >= 16: {exc}", allow_module_level=True)

from bench.invert import Peer, check, describe, start_theta
from engine.worker import BackendWorker

WIDTH, HEIGHT = 64, 32


class _OursInWorker:
    """Our side of `bench.invert.check` through the "render_gradient" computation in a cpu worker."""

    def __init__(self, worker: BackendWorker, target: np.ndarray):
        self.worker, self.target, self.weight = worker, target, np.ones((HEIGHT, WIDTH), np.float32)

    def set_weight(self, weight: np.ndarray | None) -> None:
        self.weight = np.ones((HEIGHT, WIDTH), np.float32) if weight is None else weight

    def evaluate(self, theta: np.ndarray) -> dict:
        return self.worker.call("render_gradient", theta=theta, target=self.target, weight=self.weight, width=WIDTH,
                                height=HEIGHT, edges=True, timeout_s=1800.0)


def _peer(target: np.ndarray, cls: type = Peer) -> Peer:
    from engine.render import Camera, camera_params

    peer = cls()
    peer.set_view(camera_params(Camera(), WIDTH, HEIGHT).astype(np.float32), WIDTH, HEIGHT, target)
    return peer


@pytest.fixture(scope="module")
def ours():
    """Our side, its target being our render at theta*."""
    truth, _ = start_theta()
    worker = BackendWorker("cpu")
    try:
        blank = _OursInWorker(worker, np.zeros((HEIGHT, WIDTH, 3), np.float32))
        yield _OursInWorker(worker, blank.evaluate(truth)["image"])
    finally:
        worker.close()


def test_the_port_renders_our_image_and_gradient(ours):
    truth, theta = start_theta()
    peer = _peer(ours.target)
    assert np.abs(peer.r.render(truth) - ours.target).max() <= 0.05
    c = check(ours, peer, theta)
    assert c["ok"], describe(c)
    # the comparison is of the same image, nearly everywhere; the silhouette band is a third of it at 64x32
    assert c["agreeing"] + c["edge_share"] > 0.9 and c["agreeing"] > 0.5 and c["loss_rel"] < 1e-4


def test_the_comparison_can_fail(ours):
    """The same port one joint degree off disagrees."""
    _, theta = start_theta()
    moved = theta.copy()
    moved[1] += np.radians(1.0)

    class _Moved(Peer):
        def evaluate(self, _theta):
            return super().evaluate(moved)

    assert not check(ours, _peer(ours.target, _Moved), theta)["ok"]
