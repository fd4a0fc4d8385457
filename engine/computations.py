"""Named computations: what a backend worker (and the parity harness) can run by name.

Each entry maps a name to "module:function"; the function takes numpy inputs as
keyword arguments and returns a dict of numpy arrays. A "module:function" path is
accepted in place of a name (tests use it for deliberately failing workers).

The table holds the engine's own computations. A higher layer registers its own with
`register` (the app does so when its package is imported: app/__init__.py), so the
engine names nothing above it; `BackendWorker.call` resolves a name in the calling
process and sends the worker the "module:function" it stands for.

    >>> resolve("affine")
    'engine.checks.affine_problem:run_affine'
    >>> resolve("tests.worker_faults:hang")
    'tests.worker_faults:hang'
"""
from __future__ import annotations

import importlib

import numpy as np

REGISTRY: dict[str, str] = {
    "affine": "engine.checks.affine_problem:run_affine",
    "affine_gradcheck": "engine.checks.affine_problem:run_affine_gradcheck",
    "tape_chain": "engine.checks.chain_problem:run_tape_chain",
    "tape_chain_gradcheck": "engine.checks.chain_problem:run_tape_chain_gradcheck",
    "sgd_oracle": "engine.checks.sgd_oracle_problem:run_sgd_oracle",
    "dispatch_echo": "engine.checks.dispatch_echo:run_dispatch_echo",
    "closest_point": "engine.checks.bvh_checks:run_closest_point",
    "bvh_refit_vs_rebuild": "engine.checks.bvh_checks:run_refit_vs_rebuild",
    "render_gradient": "engine.diff_render:run_render_gradient",
    "render_gradcheck": "engine.checks.render_checks:run_render_gradcheck",
    "render_jacobian": "engine.checks.render_checks:run_render_jacobian",
    "gradients_after_views": "engine.checks.render_checks:run_gradients_after_views",
    "packets_vs_one_ray": "engine.checks.render_checks:run_packets_vs_one_ray",
    "bands_vs_one_band": "engine.checks.render_checks:run_bands_vs_one_band",
    "adjoint_checks": "engine.checks.adjoint_checks:run_adjoint_checks",
    "soft_min_stability": "engine.checks.adjoint_checks:run_soft_min_stability",
    "kinematics_check": "engine.checks.adjoint_checks:run_kinematics_check",
    "theta_adam_steps": "engine.checks.theta_adam_checks:run_theta_adam_steps",
}


def register(name: str, target: str) -> None:
    """Add computation `name` = "module:function" of a higher layer; the same name for another target raises."""
    if ":" not in target:
        raise ValueError(f"computation '{name}': the target must be 'module:function', got {target!r}")
    if REGISTRY.get(name, target) != target:
        raise ValueError(f"computation '{name}' is already registered as {REGISTRY[name]}")
    REGISTRY[name] = target


def resolve(name: str) -> str:
    """The "module:function" computation `name` stands for (a "module:function" path stands for itself)."""
    target = REGISTRY.get(name, name)
    if ":" not in target:
        raise KeyError(f"unknown computation '{name}' (known: {', '.join(sorted(REGISTRY))})")
    return target


def run(name: str, **inputs) -> dict[str, np.ndarray]:
    """Import and call computation `name` (in the current process and backend)."""
    module, function = resolve(name).split(":", 1)
    return getattr(importlib.import_module(module), function)(**inputs)
