"""Mesh loading: every format, UV-seam merging, degenerate faces, normalisation, and every bad input."""
from pathlib import Path

import numpy as np
import pytest
import trimesh

from engine.errors import UserError
from engine.mesh_io import clean, load_mesh, write_mesh

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@pytest.mark.parametrize("ext", ["obj", "ply", "stl", "off", "glb"])
def test_every_format_loads_a_box(tmp_path, ext):
    box = trimesh.creation.box(extents=(2.0, 4.0, 6.0))
    box.apply_translation((10.0, 0.0, -1.0))
    path = tmp_path / f"box.{ext}"
    box.export(path)
    mesh = load_mesh(path)
    assert mesh.vertices.shape == (8, 3) and mesh.vertices.dtype == np.float64  # STL's 36 corners merged
    assert mesh.faces.shape == (12, 3) and mesh.faces.dtype == np.int32
    np.testing.assert_allclose(mesh.vertices.min(axis=0), [-1 / 3, -2 / 3, -1.0], atol=1e-6)
    np.testing.assert_allclose(mesh.vertices.max(axis=0), [1 / 3, 2 / 3, 1.0], atol=1e-6)
    np.testing.assert_allclose(mesh.centre, [10.0, 0.0, -1.0], atol=1e-6)
    assert mesh.scale == pytest.approx(3.0)
    np.testing.assert_allclose(mesh.to_original(mesh.vertices).min(axis=0), [9.0, -2.0, -4.0], atol=1e-6)


def test_glb_scene_is_concatenated_with_node_transforms(tmp_path):
    scene = trimesh.Scene([trimesh.creation.icosphere(1)])
    scene.add_geometry(trimesh.creation.box(), transform=trimesh.transformations.translation_matrix((5, 0, 0)))
    scene.export(tmp_path / "scene.glb")
    mesh = load_mesh(tmp_path / "scene.glb", normalise=False)
    assert mesh.faces.shape == (80 + 12, 3)
    np.testing.assert_allclose(mesh.vertices.max(axis=0), [5.5, 1.0, 1.0], atol=1e-6)


def test_normalise_false_keeps_coordinates(tmp_path):
    write_mesh(tmp_path / "t.obj", [[0, 0, 0], [3, 0, 0], [0, 5, 0]], [[0, 1, 2]])
    mesh = load_mesh(tmp_path / "t.obj", normalise=False)
    np.testing.assert_array_equal(mesh.vertices, [[0, 0, 0], [3, 0, 0], [0, 5, 0]])
    assert mesh.scale == 1.0 and np.all(mesh.centre == 0)


@pytest.mark.parametrize("name, vertices, faces", [("spot", 829, 1654), ("blub", 945, 1886), ("penguin", 3362, 6720)])
def test_real_targets_are_closed_after_merging_uv_seams(name, vertices, faces):
    mesh = load_mesh(ASSETS / f"{name}.obj")
    assert mesh.vertices.shape == (vertices, 3) and mesh.faces.shape == (faces, 3)
    assert trimesh.Trimesh(mesh.vertices, mesh.faces, process=False).is_watertight
    assert np.isclose(np.abs(mesh.vertices).max(), 1.0)


def test_clean_merges_positions_and_drops_degenerate_faces():
    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0], [2, 0, 0], [9, 9, 9]], float)
    faces = np.array([[0, 1, 2], [0, 3, 2], [0, 1, 3], [0, 1, 4]])  # dup of face 0, repeated index, collinear
    v, f = clean(vertices, faces)
    np.testing.assert_array_equal(v, [[0, 0, 0], [1, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(f, [[0, 1, 2], [0, 1, 2]])


@pytest.mark.parametrize("ext, tol", [("obj", 1e-9), ("ply", 1e-6), ("stl", 1e-6), ("glb", 1e-6)])
def test_write_mesh_round_trips_in_every_format(tmp_path, ext, tol):
    rng = np.random.default_rng(1)
    v = rng.normal(size=(10, 3))
    f = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 0, 5]])
    write_mesh(tmp_path / "sub" / f"m.{ext}", v, f, header="made by a test")
    mesh = load_mesh(tmp_path / "sub" / f"m.{ext}", normalise=False)
    np.testing.assert_allclose(mesh.vertices, v, rtol=tol, atol=tol)  # OBJ: 10 decimals; the binary ones float32
    np.testing.assert_array_equal(mesh.faces, f)
    assert not list((tmp_path / "sub").glob(".*")), "no temporary file left behind"
    if ext == "obj":
        assert (tmp_path / "sub" / "m.obj").read_text().startswith("# made by a test\n")


def test_write_mesh_refuses_an_unknown_extension(tmp_path):
    with pytest.raises(UserError, match=r"cannot write '\.off'"):
        write_mesh(tmp_path / "m.off", np.eye(3), [[0, 1, 2]])


def _png(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 4)).save(path, format="PNG")
    return path


BAD = {  # file name -> (content or a writer, words the message must contain)
    "empty.obj": (b"", "empty"),
    "text.obj": (b"hello world\nthis is not a mesh\n", "no geometry"),
    "points.obj": (b"v 0 0 0\nv 1 0 0\nv 0 1 0\n", "point cloud of 3 points"),
    "points.ply": (b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
                   b"property float z\nend_header\n0 0 0\n1 0 0\n", "point cloud of 2 points"),
    "nan.obj": (b"v 0 0 0\nv 1 0 0\nv 0 nan 0\nf 1 2 3\n", "NaN or infinite"),
    "inf.off": (b"OFF\n3 1 0\n0 0 0\n1 0 0\n0 inf 0\n3 0 1 2\n", "NaN or infinite"),
    "flat.obj": (b"v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\nf 1 1 2\n", "degenerate"),
    "corrupt.ply": (b"garbage\n", "could not be read as PLY"),
    "corrupt.glb": (b"garbage bytes here", "could not be read as GLB"),
    "corrupt.off": (b"garbage\n", "could not be read as OFF"),
    "image.obj": (_png, "PNG image"),
    "image.stl": (_png, "PNG image"),
    "image.png": (_png, "unsupported format"),
    "binary.obj": (b"v 0 0 0\n\0\0\0\1\2\3", "binary content"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_give_one_line_naming_the_file(tmp_path, name):
    content, words = BAD[name]
    path = tmp_path / name
    content(path) if callable(content) else path.write_bytes(content)
    with pytest.raises(UserError) as info:
        load_mesh(path)
    message = str(info.value)
    assert str(path) in message and words in message and "\n" not in message


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_mesh(tmp_path / "nope.obj")
    (tmp_path / "dir.obj").mkdir()
    with pytest.raises(UserError, match="not a file"):
        load_mesh(tmp_path / "dir.obj")
