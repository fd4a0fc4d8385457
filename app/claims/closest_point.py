"""Claim `closest_point`: BVH closest-point queries validated three ways.

On the 20,480-triangle icosphere and each real target in assets/ (spot, blub,
penguin), seeded near-surface and far queries: backend A's BVH == backend A's brute
force == backend B's BVH (== backend B's brute force), squared distances within 1e-6
relative (face ids are not compared: a query closest to a shared edge or vertex has
several correct faces), on each backend through both entry points (numpy and fields, the
batch searched in Morton order on the device); no misses and no stack overflows anywhere.
"""
from __future__ import annotations

import numpy as np

from app.scenes.fit_settings import ASSETS, REAL_TARGETS
from engine import computations
from engine.triangle_bvh import sample_queries
from engine.mesh_io import load_mesh
from engine.meshgen import icosphere

QUERIES = 1024  # per mesh: half near the surface, half far
REL_TOL = 1e-6


def max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max(|a|, |b|) over the elements (0 where both are 0)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    return float(np.max(np.where(scale > 0, np.abs(a - b) / np.where(scale > 0, scale, 1.0), 0.0)))


def _meshes() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    meshes = {"icosphere5": icosphere(5)}
    for name in REAL_TARGETS:
        mesh = load_mesh(ASSETS / f"{name}.obj")
        meshes[name] = (mesh.vertices, mesh.faces)
    return meshes


def run(ctx) -> None:
    a_name, b_name = ctx.arch, ctx.parity_arch
    worst_brute, worst_parity, total = 0.0, 0.0, 0
    for seed, (name, (vertices, faces)) in enumerate(_meshes().items()):
        points = sample_queries(vertices, faces, QUERIES, seed=seed)
        out_a = computations.run("closest_point", vertices=vertices, faces=faces, points=points)
        out_b = ctx.parity.call("closest_point", vertices=vertices, faces=faces, points=points)
        brute = max(max_rel_err(out[key], out["brute_dist2"])
                    for out in (out_a, out_b) for key in ("dist2", "field_dist2"))
        parity = max_rel_err(out_a["dist2"], out_b["dist2"])
        guards = sum(int(out[key]) for out in (out_a, out_b) for key in ("misses", "overflows"))
        worst_brute, worst_parity, total = max(worst_brute, brute), max(worst_parity, parity), total + len(points)
        ctx.check(brute <= REL_TOL and parity <= REL_TOL and guards == 0,
                  f"{name} ({len(faces)} triangles, {len(points)} queries): {a_name} == {b_name} == brute force "
                  f"(max rel err {max(brute, parity):.2g}), {guards} misses/overflows")
    ctx.metric(queries=total, max_rel_err_vs_brute=worst_brute, parity_max_rel_err=worst_parity)
