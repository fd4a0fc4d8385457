"""Open3D's side of the closest-point benchmark: `o3d.t.geometry.RaycastingScene.compute_closest_points`
(Embree on the CPU; imported only when open3d is installed: a benchmark peer, never a runtime dependency).

Same interface as `bench.closest_warp.WarpMesh`. Embree builds its BVH lazily, on the
scene's first query, so `build` includes a one-point query. A scene cannot be refitted.
"""
from __future__ import annotations

import os

import numpy as np
import open3d as o3d


class Open3DScene:
    """One Embree scene holding the mesh, and the query points by batch size."""

    threads = os.cpu_count()  # Open3D runs a batch through TBB on every core

    def __init__(self, vertices: np.ndarray, faces: np.ndarray) -> None:
        self.vertices = o3d.core.Tensor(np.asarray(vertices, np.float32))
        self.faces = o3d.core.Tensor(np.asarray(faces, np.uint32))
        self.scene = self.build()
        self.queries: dict[int, o3d.core.Tensor] = {}
        self.answers: dict[int, dict] = {}

    def build(self) -> o3d.t.geometry.RaycastingScene:
        """A fresh scene with its BVH committed (by a one-point query)."""
        scene = o3d.t.geometry.RaycastingScene()
        scene.add_triangles(self.vertices, self.faces)
        scene.compute_closest_points(o3d.core.Tensor(np.zeros((1, 3), np.float32)))
        return scene

    def load(self, points: np.ndarray) -> None:
        self.queries[len(points)] = o3d.core.Tensor(np.ascontiguousarray(points, np.float32))

    def query(self, n: int) -> None:
        self.answers[n] = self.scene.compute_closest_points(self.queries[n])

    def results(self, n: int) -> dict[str, np.ndarray]:
        answer = self.answers[n]
        closest = answer["points"].numpy().astype(np.float64)
        dist2 = np.sum((closest - self.queries[n].numpy()) ** 2, axis=1)
        face = answer["primitive_ids"].numpy().astype(np.int64)
        face[face == np.iinfo(np.uint32).max] = -1  # Open3D's INVALID_ID
        return {"face": face, "dist2": dist2}

    def synchronize(self) -> None:
        """Queries return when done (the CPU is the only device)."""
