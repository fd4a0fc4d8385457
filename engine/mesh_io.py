"""Mesh files in and out: load OBJ, PLY, STL, OFF and GLB as one clean triangle mesh; write OBJ, PLY, STL or GLB.

`load_mesh(path)` reads through trimesh (scenes are concatenated into one mesh), then
makes the mesh fit for a BVH and for area sampling:

- vertices are merged by exact position: textured OBJs split a vertex along every UV
  seam (spot and blub do), which would leave cracks between triangles that share an
  edge in space but not in index;
- degenerate faces (a repeated index, or zero area) and unreferenced vertices are dropped;
- unless `normalise=False`, the mesh is centred on its bounding-box centre and scaled so
  that its largest half-extent is 1 (it fits in [-1, 1]^3). `Mesh.centre` and
  `Mesh.scale` map results back: original = normalised * scale + centre.

Anything that is not a usable triangle mesh raises `UserError` with one line naming
the file and what is wrong with it: a file that cannot be read, foreign content, an OBJ
face naming a vertex that does not exist (OBJ counts from 1), coordinates so large that
the mesh's extent overflows. `write_mesh` writes through trimesh, the format chosen by
the file's extension, atomically.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import atomic
from engine.errors import UserError

FORMATS = ("obj", "ply", "stl", "off", "glb")
WRITE_FORMATS = ("obj", "ply", "stl", "glb")


@dataclass(frozen=True)
class Mesh:
    vertices: np.ndarray  # (V, 3) float64, normalised unless loaded with normalise=False
    faces: np.ndarray  # (F, 3) int32, every face of positive area
    centre: np.ndarray  # (3,) float64: original = vertices * scale + centre
    scale: float
    name: str = ""

    def to_original(self, points: np.ndarray) -> np.ndarray:
        """Map points from this mesh's (normalised) frame back to the file's coordinates."""
        return np.asarray(points, dtype=np.float64) * self.scale + self.centre


_SIGNATURES = {b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"%PDF": "a PDF document",
               b"PK\x03\x04": "a ZIP archive", b"GIF8": "a GIF image"}


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The file's vertices and faces (a scene's meshes concatenated), or UserError saying why not."""
    import trimesh

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"mesh file {path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    head = data[:4096]
    for magic, what in _SIGNATURES.items():
        if head.startswith(magic):
            raise UserError(f"mesh file {path}: not a mesh ({what})")
    if path.suffix.lower() in (".obj", ".off") and b"\0" in head:
        raise UserError(f"mesh file {path}: binary content in a text {path.suffix[1:].upper()} file")
    if path.suffix.lower() == ".obj":
        _check_obj_indices(path, data)
    try:
        loaded = trimesh.load(str(path), file_type=path.suffix[1:].lower(), process=False)
        if isinstance(loaded, trimesh.Scene):
            parts = [g for g in loaded.dump() if isinstance(g, trimesh.Trimesh)] if loaded.geometry else []
            points = sum(len(g.vertices) for g in loaded.geometry.values() if isinstance(g, trimesh.PointCloud))
            loaded = trimesh.util.concatenate(parts) if parts else trimesh.PointCloud(np.zeros((points, 3)))
    except Exception as exc:  # trimesh raises many types for corrupt or foreign content
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, ImportError):  # trimesh reached for a text-encoding sniffer: not text it knows
            reason = "unrecognised content"
        raise UserError(f"mesh file {path}: could not be read as {path.suffix[1:].upper()} ({reason[:120]})") from None
    vertices = np.asarray(getattr(loaded, "vertices", np.zeros((0, 3))), dtype=np.float64).reshape(-1, 3)
    if isinstance(loaded, trimesh.PointCloud) and len(vertices):
        raise UserError(f"mesh file {path}: a point cloud of {len(vertices)} points with no faces")
    faces = np.asarray(getattr(loaded, "faces", np.zeros((0, 3))), dtype=np.int64).reshape(-1, 3)
    return vertices, faces


_OBJ_LINE = re.compile(rb"^[ \t]*(v|f)[ \t]+([^\r\n#]*)", re.MULTILINE)


def _check_obj_indices(path: Path, data: bytes) -> None:
    """UserError for an OBJ face that names a vertex the file does not have (trimesh would wrap or drop it).

    OBJ counts vertices from 1; a negative index counts back from the last vertex read so far."""
    count = 0
    for match in _OBJ_LINE.finditer(data):
        if match.group(1) == b"v":
            count += 1
            continue
        for token in match.group(2).split():
            try:
                index = int(token.split(b"/")[0])
            except ValueError:
                continue  # not a number: trimesh reports what it makes of it
            if index == 0 or index > count or index < -count:
                line = data.count(b"\n", 0, match.start()) + 1
                hint = " (OBJ counts vertices from 1)" if index == 0 else ""
                raise UserError(f"mesh file {path}: the face on line {line} uses vertex {index}, but only {count} "
                                f"vertices are defined before it{hint}")


def clean(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge vertices by position, drop degenerate faces and unused vertices (order kept stable)."""
    vertices = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    _, first, inverse = np.unique(vertices, axis=0, return_index=True, return_inverse=True)
    # Renumber merged vertices in order of first appearance, so the output does not depend on sort order.
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    faces = rank[inverse.reshape(-1)][faces]
    vertices = vertices[np.sort(first)]
    repeated = (faces[:, 0] == faces[:, 1]) | (faces[:, 1] == faces[:, 2]) | (faces[:, 0] == faces[:, 2])
    a, b, c = (vertices[faces[:, k]] for k in range(3))
    area2 = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    faces = faces[~repeated & (area2 > 0.0)]
    used = np.zeros(len(vertices), dtype=bool)
    used[faces.reshape(-1)] = True
    remap = np.cumsum(used) - 1
    return vertices[used], remap[faces].astype(np.int32)


def load_mesh(path: str | os.PathLike, normalise: bool = True) -> Mesh:
    """Load one triangle mesh from `path` (see the module docstring)."""
    path = Path(path)
    ext = path.suffix[1:].lower()
    if ext not in FORMATS:
        raise UserError(f"mesh file {path}: unsupported format '{path.suffix or '(none)'}' "
                        f"(supported: {', '.join('.' + f for f in FORMATS)})")
    if not path.is_file():
        raise UserError(f"mesh file {path}: not found" if not path.exists() else f"mesh file {path}: not a file")
    if path.stat().st_size == 0:
        raise UserError(f"mesh file {path}: the file is empty")
    vertices, faces = _read(path)
    if len(vertices) == 0:
        raise UserError(f"mesh file {path}: no geometry found (not {ext.upper()} content, or an empty mesh)")
    if len(faces) == 0:
        raise UserError(f"mesh file {path}: {len(vertices)} vertices but no faces")
    if not np.all(np.isfinite(vertices)):
        bad = int(np.count_nonzero(~np.all(np.isfinite(vertices), axis=1)))
        raise UserError(f"mesh file {path}: {bad} vertices have NaN or infinite coordinates")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise UserError(f"mesh file {path}: faces index vertices that do not exist")
    with np.errstate(over="ignore", invalid="ignore"):
        extent = vertices.max(axis=0) - vertices.min(axis=0)
        overflows = not np.all(np.isfinite(np.square(extent)))  # triangle areas are products of two extents
    if overflows:
        raise UserError(f"mesh file {path}: coordinates up to {np.abs(vertices).max():.3g} are too large "
                        "(the mesh's extent overflows 64-bit floats)")
    vertices, faces = clean(vertices, faces)
    if len(faces) == 0:
        raise UserError(f"mesh file {path}: every face is degenerate (zero area)")
    return make_mesh(vertices, faces, path.stem, normalise)


def make_mesh(vertices: np.ndarray, faces: np.ndarray, name: str = "", normalise: bool = True) -> Mesh:
    """A `Mesh` from clean arrays (e.g. `engine.meshgen`), normalised like a loaded file unless asked not to."""
    vertices = np.asarray(vertices, dtype=np.float64)
    centre, scale = np.zeros(3), 1.0
    if normalise:
        lo, hi = vertices.min(axis=0), vertices.max(axis=0)
        centre, scale = (lo + hi) / 2.0, float((hi - lo).max() / 2.0)
        vertices = (vertices - centre) / scale
    return Mesh(vertices, np.asarray(faces, dtype=np.int32), centre, scale, name)


def write_mesh(path: str | os.PathLike, vertices: np.ndarray, faces: np.ndarray, header: str = "") -> None:
    """Write a triangle mesh (atomically) as OBJ, PLY, STL or GLB by the extension of `path`, through trimesh.

    OBJ keeps 10 decimal places and a one-line `header` comment; the binary formats store float32.

        write_mesh("out/final.ply", vertices, faces)   # vertices (V, 3) float, faces (F, 3) int, 0-based
    """
    import trimesh

    target = Path(path)
    ext = target.suffix[1:].lower()
    if ext not in WRITE_FORMATS:
        raise UserError(f"mesh file {target}: cannot write '{target.suffix or '(none)'}' "
                        f"(supported: {', '.join('.' + f for f in WRITE_FORMATS)})")
    mesh = trimesh.Trimesh(np.asarray(vertices, dtype=np.float64).reshape(-1, 3),
                           np.asarray(faces, dtype=np.int64).reshape(-1, 3), process=False)
    options = {"digits": 10, "include_normals": False, "header": " ".join(header.split())} if ext == "obj" else {}
    atomic.write_bytes(target, _as_bytes(mesh.export(file_type=ext, **options)))


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data
