"""fcpw's side of the closest-point benchmark (Rohan Sawhney's fcpw, MIT): the PyPI wheel, built
without SIMD, and the same library built with its SIMD path (Enoki: 4-wide nodes, leaves of
SIMD-width triangles tested at once) as `_fcpwsimd`, a peer only, never a project dependency.

    simd, why_not = import_fcpw_simd(path)    # path: --fcpw-simd or $SHANNON_FCPW_SIMD (a folder)
    scene = FcpwScene(vertices, faces, simd or fcpw, vectorize=True)

Build `_fcpwsimd` outside the repository with `bash /work/shared/peers/fcpw/build.sh PYTHON DIR`
(Debian libeigen3-dev, cmake, ninja). The two modules name their classes differently
(`scene_3D` / `Scene3D`); both are wrapped here. fcpw splits a batch statically over
`std::thread::hardware_concurrency()` threads. Same interface as `bench.closest_warp.WarpMesh`.
"""
from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import numpy as np

SIMD_ENV = "SHANNON_FCPW_SIMD"


def import_fcpw_simd(path: str | None) -> tuple[ModuleType | None, str]:
    """`_fcpwsimd` from the folder `path` (or $SHANNON_FCPW_SIMD), or None and the reason it is absent."""
    folder = path or os.environ.get(SIMD_ENV)
    if not folder:
        return None, f"no path given (--fcpw-simd DIR or ${SIMD_ENV})"
    if not os.path.isdir(folder):
        return None, f"{folder} is not a folder"
    sys.path.insert(0, folder)
    try:
        return importlib.import_module("_fcpwsimd"), ""
    except ImportError as exc:
        return None, f"not importable from {folder} ({exc})"
    finally:
        sys.path.remove(folder)


def _names(module: ModuleType) -> tuple:
    if hasattr(module, "Scene3D"):  # the SIMD build's bindings
        return module.Scene3D, module.AggregateType.Bvh_SurfaceArea, module.Interaction3DList, module.Interaction3D
    return module.scene_3D, module.aggregate_type.bvh_surface_area, module.interaction_3D_list, module.interaction_3D


class FcpwScene:
    """One fcpw scene (surface-area-heuristic BVH) holding the mesh, and its query points by batch size."""

    threads = os.cpu_count()  # fcpw's batch query: hardware_concurrency() threads

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, module: ModuleType, vectorize: bool) -> None:
        self.scene_type, self.aggregate, self.list_type, self.answer_type = _names(module)
        self.vectorize = vectorize
        self.vertices = np.asfortranarray(vertices, np.float32)
        self.faces = np.asfortranarray(faces, np.int32)
        self.scene = self.build()
        self.queries: dict[int, tuple] = {}

    def build(self):
        """A fresh scene with its BVH built."""
        scene = self.scene_type()
        scene.set_object_count(1)
        scene.set_object_vertices(self.vertices, 0)
        scene.set_object_triangles(self.faces, 0)
        scene.build(self.aggregate, self.vectorize)
        return scene

    def refit(self) -> None:
        self.scene.refit()

    def load(self, points: np.ndarray) -> None:
        n = len(points)
        self.queries[n] = (np.asfortranarray(points, np.float32), np.full(n, np.inf, np.float32), self.list_type())

    def query(self, n: int) -> None:
        points, radii, answers = self.queries[n]
        self.scene.find_closest_points(points, radii, answers)

    def results(self, n: int) -> dict[str, np.ndarray]:
        answers = self.queries[n][2]
        if hasattr(answers, "get_distances"):
            distance, face = np.asarray(answers.get_distances()), np.asarray(answers.get_primitive_indices())
        else:  # the PyPI wheel's list has no bulk getters
            distance = np.array([a.d for a in answers])
            face = np.array([a.primitive_index for a in answers])
        return {"face": face.astype(np.int64), "dist2": np.square(distance.astype(np.float64))}

    def one_call(self, point: np.ndarray) -> dict[str, np.ndarray]:
        """One point through fcpw's single-query call (its batch call starts a thread per core)."""
        answer = self.answer_type()
        self.scene.find_closest_point(np.ascontiguousarray(point[0], np.float32), answer)
        return {"face": np.array([answer.primitive_index]), "dist2": np.array([answer.d]) ** 2}

    def synchronize(self) -> None:
        """Queries return when done."""
