"""libigl's side of the closest-point benchmark, and its correctness oracle: `igl.AABB` in float64.

Every peer's distances (ours included) are checked against these before any time is printed.
libigl's `squared_distance` runs its points through igl::parallel_for (hardware threads).
Same interface as `bench.closest_warp.WarpMesh`; an AABB tree has no refit.
"""
from __future__ import annotations

import os

import igl
import numpy as np


class IglTree:
    """One float64 AABB tree over the mesh, and its query points by batch size."""

    threads = os.cpu_count()

    def __init__(self, vertices: np.ndarray, faces: np.ndarray) -> None:
        self.vertices = np.ascontiguousarray(vertices, np.float64)
        self.faces = np.ascontiguousarray(faces, np.int64)
        self.tree = self.build()
        self.queries: dict[int, np.ndarray] = {}
        self.answers: dict[int, tuple] = {}

    def build(self) -> igl.AABB:
        tree = igl.AABB()
        tree.init(self.vertices, self.faces)
        return tree

    def load(self, points: np.ndarray) -> None:
        self.queries[len(points)] = np.ascontiguousarray(points, np.float64)

    def query(self, n: int) -> None:
        self.answers[n] = self.tree.squared_distance(self.vertices, self.faces, self.queries[n])

    def results(self, n: int) -> dict[str, np.ndarray]:
        dist2, face, _ = self.answers[n]
        return {"face": np.asarray(face, np.int64), "dist2": np.asarray(dist2, np.float64)}

    def synchronize(self) -> None:
        """Queries return when done."""
