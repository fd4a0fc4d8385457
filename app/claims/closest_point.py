"""Claim `closest_point`: BVH closest-point queries validated three ways.

On the 20,480-triangle icosphere and each real target in assets/ (spot, blub,
penguin), seeded near-surface and far queries: on each backend, the BVH through both entry
points (numpy and fields, the batch searched in Morton order on the device) == that backend's
brute force, squared distances within 1e-6 relative (the same float32 arithmetic); backend A's
distances == backend B's within 1e-6 of the mesh's bounding-box diagonal (face ids are not
compared: a query closest to a shared edge or vertex has several correct faces); no misses and
no stack overflows anywhere.

Why the parity is not relative: backends round differently (on the first H200 run, 2026-12-01,
cuda's squared distances differed from cpu's by up to 2.7e-5 relative, where cpu and vulkan agree
to 1e-6: NVPTX fuses multiply-adds), and a squared distance near the surface is a small difference
of large coordinates, so its relative error grows as the query nears the mesh while the distance's
error stays a few float32 spacings of the coordinates, i.e. a fixed fraction of the mesh's size.
"""
from __future__ import annotations

import numpy as np

from app.scenes.fit_settings import ASSETS, REAL_TARGETS
from engine import computations
from engine.checks.bvh_checks import sample_queries
from engine.mesh_io import load_mesh
from engine.parity import distance_error, mesh_diagonal
from engine.meshgen import icosphere

QUERIES = 1024  # per mesh: half near the surface, half far
REL_TOL = 1e-6
DIAG_TOL = 1e-6  # backend A vs B: |d_a - d_b| / bounding-box diagonal


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
        parity = distance_error(out_a["dist2"], out_b["dist2"], mesh_diagonal(vertices))
        guards = sum(int(out[key]) for out in (out_a, out_b) for key in ("misses", "overflows"))
        worst_brute, worst_parity, total = max(worst_brute, brute), max(worst_parity, parity), total + len(points)
        ctx.check(brute <= REL_TOL and parity <= DIAG_TOL and guards == 0,
                  f"{name} ({len(faces)} triangles, {len(points)} queries): BVH == brute force on {a_name} and "
                  f"{b_name} (max rel err {brute:.2g} <= {REL_TOL:g}), {a_name} == {b_name} (max distance err "
                  f"{parity:.2g} x diagonal <= {DIAG_TOL:g}), {guards} misses/overflows")
    ctx.metric(queries=total, max_rel_err_vs_brute=worst_brute, parity_max_err_x_diagonal=worst_parity)
