"""bench/warp_raymarch.py, the Warp port of the ray-march kernel, renders what engine/kernels/raymarch.py renders.

The port is a second copy of every line of the kernel (Warp is the benchmark peer), so a change
to the scene, the march or the shading must be ported, or `bench raymarch` times a different
picture. This test renders small frames with both, in one process on the CPU, and holds them to
the project's parity figures (app/claims/thresholds.py). When it fails, port the change to
bench/warp_raymarch.py; do not loosen the figures. Skipped without warp-lang, except in CI,
which installs the bench extra (scripts/setup.sh), so drift cannot hide there.
"""
from __future__ import annotations

import importlib.util

import pytest

from app.claims.raymarch_parity import pixel_parity
from app.claims.thresholds import PIXEL_ATOL, PIXEL_MAX_ERR, PIXEL_MIN_SHARE
from tests.conftest import IN_CI

if importlib.util.find_spec("warp") is None:
    if IN_CI:
        pytest.fail("warp-lang must be installed in CI (the bench extra): the Warp port is checked here", pytrace=False)
    pytest.skip("warp-lang is not installed (pip install -e '.[bench]')", allow_module_level=True)

WIDTH, HEIGHT = 160, 80


@pytest.mark.parametrize("t", [0.15, 0.5])  # the A lying on the table, and carried upright in the gripper
def test_the_warp_port_renders_what_the_kernel_renders(ti_cpu, t):
    from app.scenes.robot_arm import scene_at
    from bench.warp_raymarch import WarpRenderer
    from engine.render import Camera, Renderer, pack

    scene, camera = scene_at(t), Camera()
    ours = Renderer(WIDTH, HEIGHT).render(scene, camera)
    port = WarpRenderer(WIDTH, HEIGHT, "cpu")
    port.render(pack(scene, camera, WIDTH, HEIGHT))
    share, max_err, err = pixel_parity(ours, port.image())
    assert ours.std() > 0.05, "the frame is blank: nothing was compared"
    assert share >= PIXEL_MIN_SHARE and max_err <= PIXEL_MAX_ERR, (
        f"bench/warp_raymarch.py no longer renders what engine/kernels/raymarch.py renders at t={t}: "
        f"{share * 100:.3f} % of pixels within {PIXEL_ATOL:g} (>= {PIXEL_MIN_SHARE * 100:g} % needed), max error "
        f"{max_err:.3g} (<= {PIXEL_MAX_ERR:g}), {int((err > PIXEL_ATOL).sum())} pixels off. Port the kernel's change "
        f"to bench/warp_raymarch.py; do not loosen the figures")
