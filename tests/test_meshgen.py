"""The icosphere: counts, unit radius, outward winding, shared vertices, a closed 2-manifold."""
import numpy as np
import pytest

from engine.errors import UserError
from engine.meshgen import icosphere


@pytest.mark.parametrize("subdiv, n_vertices, n_faces", [(0, 12, 20), (3, 642, 1280), (5, 10242, 20480)])
def test_counts_and_types(subdiv, n_vertices, n_faces):
    v, f = icosphere(subdiv)
    assert v.shape == (n_vertices, 3) and v.dtype == np.float64
    assert f.shape == (n_faces, 3) and f.dtype == np.int32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-15)


@pytest.mark.parametrize("subdiv", [0, 1, 3])
def test_closed_manifold_with_outward_winding(subdiv):
    v, f = icosphere(subdiv)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    normals = np.cross(b - a, c - a)
    assert np.all(np.einsum("ij,ij->i", normals, (a + b + c) / 3) > 0), "every face wound outward"
    # Each directed edge appears once and its reverse once: closed, consistently oriented, deduplicated.
    directed = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
    assert len(np.unique(directed, axis=0)) == len(directed)
    assert set(map(tuple, directed)) == set(map(tuple, directed[:, ::-1]))
    assert len(v) - len(directed) // 2 + len(f) == 2  # Euler characteristic of a sphere
    assert len(np.unique(np.round(v, 12), axis=0)) == len(v), "no duplicated vertices"
    assert np.all(np.bincount(f.reshape(-1), minlength=len(v)) > 0), "no unused vertices"


def test_closed_volume_is_near_the_unit_ball():
    v, f = icosphere(5)
    volume = np.einsum("ij,ij->i", v[f[:, 0]], np.cross(v[f[:, 1]], v[f[:, 2]])).sum() / 6
    assert 4 / 3 * np.pi * 0.99 < volume < 4 / 3 * np.pi


@pytest.mark.parametrize("bad", [-1, 9, 2.5, "3", True])
def test_bad_subdiv_is_a_user_error(bad):
    with pytest.raises(UserError, match="icosphere subdiv"):
        icosphere(bad)
