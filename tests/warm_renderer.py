"""Compile the differentiable renderer's kernels on one backend into Taichi's offline cache, then exit.

    python -m tests.warm_renderer vulkan

tests/conftest.py starts one per backend, at nice 19, in the background as the suite starts, when
tests that use the renderer are selected: a cold compile takes a minute or two per backend,
almost all of it on one core, and the suite's first tests leave the other core mostly idle.
Every later process whose first fields are the shared renderer's (the render tests' workers,
`python -m app invert`, the app's workers, the examples) then loads the kernels instead
(Taichi keys its cache by SNode ids and the CPU thread cap, both the same here as there).
It evaluates what those tests evaluate, at a small size: the loss and its gradient with the
differentiable and the forward image compared, over one and four pyramid levels, and central
differences of the whole renderer. Asserts nothing: whatever fails here fails again, with its
message, in the tests.
"""
from __future__ import annotations

import sys

import numpy as np


def main(arch: str) -> None:
    import app  # noqa: F401  (registers the app's computations)
    from app.scenes.robot_arm import theta_at
    from engine import backend
    from engine.checks.render_checks import run_render_gradcheck
    from engine.diff_render import run_render_gradient

    backend.init(arch)
    theta = theta_at(0.1)
    target, weight = np.zeros((32, 64, 3), np.float32), np.ones((32, 64), np.float32)
    for options in ({}, {"levels": 4}, {"compare": "forward"}):
        run_render_gradient(theta, target, weight, 64, 32, **options)
    run_render_gradcheck(theta, theta, 64, 32, components=np.array([0]))
    backend.stop()  # writes the offline cache now


if __name__ == "__main__":
    main(sys.argv[1])
