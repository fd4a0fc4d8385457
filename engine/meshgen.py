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
