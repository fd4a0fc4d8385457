"""The closest-point benchmark's meshes and query distributions (host-side data, seeded).

    cases()                       # [Case(mesh, distribution)] in the issue's order
    mesh_named("spot254k")        # (vertices float64 (V, 3), faces int64 (F, 3)), made once per process
    queries(vertices, faces, "near", 1024, seed=0)   # float32 (n, 3)

Meshes: `icosphere` (engine.meshgen.icosphere(5): 20,480 triangles); `spot254k`: the bundled
spot (assets/spot.obj, normalised) split by trimesh's `subdivide_to_size` until no edge is
longer than 0.0125 (254,080 triangles); `spot1m`: that mesh with every triangle split into
four once more (1,016,320 triangles). Distributions: `uniform` in [-2, 2]^3 (the icosphere's);
`near`: area-weighted surface points plus Gaussian noise of 1 % of the bounding-box diagonal
per axis; `far`: uniform in the bounding box grown 2x about its centre.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np

from engine.parity import mesh_diagonal as diagonal  # the scale every distance error is given in

ASSETS = Path(__file__).resolve().parents[1] / "assets"
MESHES = ("icosphere", "spot254k", "spot1m")
DISTRIBUTIONS = {"icosphere": ("uniform",), "spot254k": ("near", "far"), "spot1m": ("near", "far")}
SPOT_MAX_EDGE = 0.0125  # normalised spot, split to this edge length: 254,080 triangles
NEAR_NOISE = 0.01  # of the bounding-box diagonal


class Case(NamedTuple):
    mesh: str
    distribution: str


def cases(meshes: tuple[str, ...] = MESHES) -> list[Case]:
    """Every (mesh, distribution) cell of the benchmark for the given meshes."""
    return [Case(mesh, dist) for mesh in meshes for dist in DISTRIBUTIONS[mesh]]


@functools.lru_cache(maxsize=None)
def mesh_named(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The benchmark mesh `name` (see the module docstring): float64 vertices, int64 faces."""
    from trimesh import remesh

    from engine.mesh_io import load_mesh
    from engine.meshgen import icosphere

    if name == "icosphere":
        vertices, faces = icosphere(5)
        return vertices.astype(np.float64), faces.astype(np.int64)
    if name == "spot254k":
        spot = load_mesh(ASSETS / "spot.obj")
        vertices, faces = remesh.subdivide_to_size(spot.vertices, spot.faces, max_edge=SPOT_MAX_EDGE, max_iter=20)
        return np.asarray(vertices, np.float64), np.asarray(faces, np.int64)
    if name == "spot1m":
        vertices, faces = remesh.subdivide(*mesh_named("spot254k"))
        return np.asarray(vertices, np.float64), np.asarray(faces, np.int64)
    raise KeyError(name)



def queries(vertices: np.ndarray, faces: np.ndarray, distribution: str, n: int, seed: int) -> np.ndarray:
    """n float32 query points of `distribution` (uniform, near, far) around the mesh, from `seed`."""
    rng = np.random.default_rng(seed)
    if distribution == "uniform":
        return rng.uniform(-2.0, 2.0, (n, 3)).astype(np.float32)
    lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    if distribution == "far":
        return ((lo + hi) / 2 + rng.uniform(-1.0, 1.0, (n, 3)) * (hi - lo)).astype(np.float32)
    if distribution != "near":
        raise KeyError(distribution)
    corners = vertices[faces]
    area = np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    face = rng.choice(len(faces), size=n, p=area / area.sum())
    r1, r2 = rng.random(n), rng.random(n)
    s = np.sqrt(r1)  # uniform over each triangle: weights (1 - s, s (1 - r2), s r2)
    weights = np.stack([1 - s, s * (1 - r2), s * r2], axis=1)
    surface = np.einsum("ij,ijk->ik", weights, corners[face])
    return (surface + rng.normal(0.0, NEAR_NOISE * diagonal(vertices), (n, 3))).astype(np.float32)
