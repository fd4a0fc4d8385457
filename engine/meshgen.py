"""Procedural meshes generated on the host: the icosphere every shape fit starts from.

Host-side set-up, not device math: it runs once per problem, before any kernel.
"""
from __future__ import annotations

import numpy as np

from engine.errors import UserError

_MAX_SUBDIV = 8  # 655,362 vertices; beyond that the Python midpoint loop takes minutes


def _icosahedron() -> tuple[np.ndarray, np.ndarray]:
    """The 12 vertices (on the unit sphere) and 20 outward-wound faces of a regular icosahedron."""
    t = (1.0 + 5.0 ** 0.5) / 2.0
    v = np.array([
        [-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0],
        [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
        [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1],
    ], dtype=np.float64)
    f = np.array([
        [0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11],
        [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8],
        [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
        [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1],
    ], dtype=np.int64)
    return v / np.linalg.norm(v, axis=1, keepdims=True), f


def icosphere(subdiv: int) -> tuple[np.ndarray, np.ndarray]:
    """A unit icosphere: vertices float64 (V, 3) on the unit sphere, faces int32 (F, 3).

    Each subdivision splits every triangle into four through its edge midpoints
    (projected onto the sphere); a midpoint shared by two faces is created once, so
    V = 10 * 4**subdiv + 2 and F = 20 * 4**subdiv (subdiv 3: 642 / 1,280;
    subdiv 5: 10,242 / 20,480). Faces are wound counter-clockwise seen from outside
    (normals (b - a) x (c - a) point away from the centre).
    """
    if isinstance(subdiv, bool) or not isinstance(subdiv, (int, np.integer)) or not 0 <= subdiv <= _MAX_SUBDIV:
        raise UserError(f"icosphere subdiv must be an integer in 0..{_MAX_SUBDIV}, got {subdiv!r}")
    vertices, faces = _icosahedron()
    for _ in range(int(subdiv)):
        vertices, faces = _split(vertices, faces)
    return vertices, faces.astype(np.int32)


def _split(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One 1-to-4 subdivision with deduplicated edge midpoints (vectorised over edges)."""
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])  # (3F, 2): ab, bc, ca
    unique, inverse = np.unique(np.sort(edges, axis=1), axis=0, return_inverse=True)
    mid = vertices[unique[:, 0]] + vertices[unique[:, 1]]
    mid /= np.linalg.norm(mid, axis=1, keepdims=True)
    n_faces = len(faces)
    ab, bc, ca = (len(vertices) + inverse.reshape(-1)).reshape(3, n_faces)
    a, b, c = faces.T
    new_faces = np.concatenate([
        np.stack([a, ab, ca], 1), np.stack([b, bc, ab], 1),
        np.stack([c, ca, bc], 1), np.stack([ab, bc, ca], 1),
    ])
    return np.concatenate([vertices, mid]), new_faces


def blob(subdiv: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A smooth star-shaped blob: the icosphere with each vertex pushed along its direction d to
    radius 1 + 0.25 sin(2 d_x + 1) cos(1.5 d_y) + 0.15 sin(3 d_z + 0.3) + 0.1 d_x d_y (in 0.5..1.5).

    The fixed low-frequency bumps make lobes and shallow dents a 642-vertex sphere can follow;
    no randomness, so every run fits the same target. Same faces as `icosphere(subdiv)`.
    """
    d, faces = icosphere(subdiv)
    x, y, z = d.T
    radius = 1.0 + 0.25 * np.sin(2.0 * x + 1.0) * np.cos(1.5 * y) + 0.15 * np.sin(3.0 * z + 0.3) + 0.1 * x * y
    return d * radius[:, None], faces


def torus(major: float = 1.0, minor: float = 0.4, n_major: int = 64, n_minor: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """A torus around the z axis: vertices float64 (n_major * n_minor, 3), faces int32, wound outward."""
    if not (0.0 < minor < major) or n_major < 3 or n_minor < 3:
        raise UserError(f"torus needs 0 < minor < major and at least 3 segments each way, got "
                        f"major={major}, minor={minor}, n_major={n_major}, n_minor={n_minor}")
    u = 2.0 * np.pi * np.arange(n_major) / n_major
    v = 2.0 * np.pi * np.arange(n_minor) / n_minor
    uu, vv = np.meshgrid(u, v, indexing="ij")
    ring = major + minor * np.cos(vv)
    vertices = np.stack([ring * np.cos(uu), ring * np.sin(uu), minor * np.sin(vv)], axis=-1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(n_major), np.arange(n_minor), indexing="ij")
    a = i * n_minor + j
    b = ((i + 1) % n_major) * n_minor + j
    c = ((i + 1) % n_major) * n_minor + (j + 1) % n_minor
    d = i * n_minor + (j + 1) % n_minor
    faces = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])
    return vertices, faces.astype(np.int32)
