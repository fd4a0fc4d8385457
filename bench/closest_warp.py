"""Warp's side of the closest-point benchmark: `wp.Mesh` + `wp.mesh_query_point_no_sign`
(imported only when warp-lang is installed; Warp is a benchmark peer, never a runtime dependency).
"""
from __future__ import annotations

import numpy as np
import warp as wp

wp.config.quiet = True


@wp.kernel
def closest(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), max_dist: float,
            face: wp.array(dtype=wp.int32), dist2: wp.array(dtype=float)):
    i = wp.tid()
    p = points[i]
    query = wp.mesh_query_point_no_sign(mesh, p, max_dist)
    if query.result:
        face[i] = query.face
        dist2[i] = wp.length_sq(wp.mesh_eval_position(mesh, query.face, query.u, query.v) - p)
    else:
        face[i] = -1


class WarpMesh:
    """One Warp mesh on `device` ("cpu" or "cuda:0") and the arrays for up to `capacity` queries."""

    threads = 1  # Warp's CPU backend runs a launch on one thread

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, device: str) -> None:
        wp.init()
        self.device = device
        self.points = wp.array(np.asarray(vertices, np.float32), dtype=wp.vec3, device=device)
        self.indices = wp.array(np.asarray(faces, np.int32).reshape(-1), dtype=wp.int32, device=device)
        self.mesh = self.build()
        self.queries: dict[int, tuple] = {}

    def build(self) -> wp.Mesh:
        """A fresh mesh (Warp builds its BVH in the constructor), synchronised."""
        mesh = wp.Mesh(points=self.points, indices=self.indices)
        wp.synchronize_device(self.device)
        return mesh

    def refit(self) -> None:
        self.mesh.refit()
        wp.synchronize_device(self.device)

    def load(self, points: np.ndarray) -> None:
        n = len(points)
        self.queries[n] = (wp.array(points, dtype=wp.vec3, device=self.device),
                           wp.zeros(n, dtype=wp.int32, device=self.device),
                           wp.zeros(n, dtype=float, device=self.device))

    def query(self, n: int) -> None:
        points, face, dist2 = self.queries[n]
        wp.launch(closest, dim=n, inputs=[self.mesh.id, points, 1.0e10, face, dist2], device=self.device)

    def results(self, n: int) -> dict[str, np.ndarray]:
        _, face, dist2 = self.queries[n]
        return {"face": face.numpy(), "dist2": dist2.numpy()}

    def synchronize(self) -> None:
        wp.synchronize_device(self.device)
