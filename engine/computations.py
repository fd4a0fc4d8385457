"""Named computations: what a backend worker (and the parity harness) can run by name.

Each entry maps a name to "module:function"; the function takes numpy inputs as
keyword arguments and returns a dict of numpy arrays. A "module:function" path is
accepted in place of a name (tests use it for deliberately failing workers).
"""
from __future__ import annotations

import importlib

import numpy as np

REGISTRY: dict[str, str] = {
    "affine": "engine.affine:run_affine",
    "affine_gradcheck": "engine.affine:run_affine_gradcheck",
    "raymarch_frame": "app.scenes.robot_arm:raymarch_frame",
    "tape_chain": "engine.chain:run_tape_chain",
    "tape_chain_gradcheck": "engine.chain:run_tape_chain_gradcheck",
    "sgd_oracle": "engine.sgd_oracle:run_sgd_oracle",
    "closest_point": "engine.bvh:run_closest_point",
    "bvh_refit_vs_rebuild": "engine.bvh:run_refit_vs_rebuild",
    "fit_gradient_at": "app.scenes.shape_fit:fit_gradient_at",
    "render_gradient": "engine.diff_render:run_render_gradient",
    "render_gradcheck": "engine.diff_render:run_render_gradcheck",
    "adjoint_checks": "engine.adjoint_checks:run_adjoint_checks",
    "soft_min_stability": "engine.adjoint_checks:run_soft_min_stability",
    "kinematics_check": "engine.adjoint_checks:run_kinematics_check",
}


def run(name: str, **inputs) -> dict[str, np.ndarray]:
    """Import and call computation `name` (in the current process and backend)."""
    target = REGISTRY.get(name, name)
    if ":" not in target:
        raise KeyError(f"unknown computation '{name}' (known: {', '.join(sorted(REGISTRY))})")
    module, function = target.split(":", 1)
    return getattr(importlib.import_module(module), function)(**inputs)
