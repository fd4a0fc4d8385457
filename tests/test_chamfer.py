"""Chamfer through the BVH: the loss against a brute-force oracle, gradients against finite
differences under held correspondence (float64), bit-reproducibility, and the Laplacian step."""
import numpy as np
import pytest
import taichi as ti

from engine.autodiff.gradcheck import compare_gradients, finite_difference_gradient
from engine.autodiff.tape import Tape
from engine.chamfer_loss import ChamferLoss, LaplacianSmoother, sample_surface
from engine.fields import FieldGroup
from engine.mesh_io import make_mesh
from engine.meshgen import blob, icosphere


def _source(subdiv: int, dtype):
    v, f = icosphere(subdiv)
    group = FieldGroup()
    x = group.vector(3, dtype, (len(v),), needs_grad=True)
    group.finalize()
    x.from_numpy(v.astype(np.float64 if dtype == ti.f64 else np.float32))
    return group, x, v, f


def _evaluate(loss: ChamferLoss, query: bool) -> tuple[float, np.ndarray]:
    tape = Tape()
    with tape:
        if query:
            loss.correspond()
        loss.record(tape)
    tape.backward(loss.value)
    value, grad = loss.value[None], loss.x.grad.to_numpy()
    tape.reset()
    return value, grad


def test_sample_surface_is_on_the_mesh_and_seeded():
    mesh = make_mesh(*icosphere(2))
    a, b = sample_surface(mesh, 500, seed=3), sample_surface(mesh, 500, seed=3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, sample_surface(mesh, 500, seed=4))
    radius = np.linalg.norm(a, axis=1)
    assert radius.max() <= 1.0 + 1e-12 and radius.min() > 0.9  # inside the circumscribed sphere, near it


def test_held_gradient_matches_finite_differences_float64(ti_cpu):
    group, x, v, f = _source(1, ti.f64)
    target = make_mesh(*blob(1))
    rng = np.random.default_rng(0)
    n = 60
    loss = ChamferLoss(x, f, target, n_samples=n, seed=1)
    held_point = rng.normal(size=(len(v), 3))
    held_face = rng.integers(0, len(f), n)
    bary = rng.random((n, 3))
    bary /= bary.sum(axis=1, keepdims=True)
    loss.hold(held_point, held_face, bary)
    x0 = v + 0.05 * rng.normal(size=v.shape)

    def value(points: np.ndarray) -> float:
        x.from_numpy(points)
        return _evaluate(loss, query=False)[0]

    # numpy oracle of the held loss, in float64 from the float32 constants the fields hold
    s = loss.samples.to_numpy().astype(np.float64)
    hp, b = held_point.astype(np.float32).astype(np.float64), bary.astype(np.float32).astype(np.float64)
    q = np.einsum("jk,jkd->jd", b, x0[f[held_face]])
    expected = np.mean(np.sum((x0 - hp) ** 2, 1)) + np.mean(np.sum((s - q) ** 2, 1))
    assert value(x0) == pytest.approx(expected, rel=1e-13)

    x.from_numpy(x0)
    analytic = _evaluate(loss, query=False)[1]
    numeric = finite_difference_gradient(value, x0, eps=1e-6)
    report = compare_gradients(analytic, numeric, atol=1e-9, rtol=1e-6)
    assert report.passed, report
    loss.destroy()
    group.destroy()


def test_loss_matches_brute_force_oracle(ti_cpu):
    group, x, v, f = _source(2, ti.f32)
    target = make_mesh(*blob(2))
    loss = ChamferLoss(x, f, target, n_samples=700, seed=0)
    value, grad = _evaluate(loss, query=True)
    to_target = loss.target_bvh.brute_force(v.astype(np.float32))["dist2"].astype(np.float64)
    to_source = loss.source_bvh.brute_force(loss.samples.to_numpy())["dist2"].astype(np.float64)
    assert value == pytest.approx(to_target.mean() + to_source.mean(), rel=1e-5)
    assert loss.misses() == 0
    assert np.all(np.isfinite(grad)) and np.abs(grad).max() > 0
    loss.destroy()
    group.destroy()


def test_loss_and_gradients_are_bit_reproducible(ti_cpu):
    results = []
    for _ in range(2):
        group, x, v, f = _source(2, ti.f32)
        loss = ChamferLoss(x, f, make_mesh(*blob(3)), n_samples=4000, seed=0)
        results.append(_evaluate(loss, query=True))
        results.append(_evaluate(loss, query=True))
        loss.destroy()
        group.destroy()
    (value, grad), *others = results
    for other_value, other_grad in others:
        assert other_value == value
        np.testing.assert_array_equal(other_grad, grad)


@pytest.mark.parametrize("n", [1, 64, 1000])
def test_slot_index_scan_matches_cumsum(ti_cpu, n):
    from engine.kernels import chamfer_terms as kernels

    counts = np.random.default_rng(n).integers(0, 9, n).astype(np.int32)
    group = FieldGroup()
    count, start, cursor = group.field(ti.i32, (n,)), group.field(ti.i32, (n + 1,)), group.field(ti.i32, (n,))
    blocks = group.field(ti.i32, (-(-n // kernels.SCAN_BLOCK),))
    group.finalize()
    count.from_numpy(counts)
    kernels.exclusive_scan(count, start, cursor, blocks)
    expected = np.concatenate([[0], np.cumsum(counts)])
    np.testing.assert_array_equal(start.to_numpy(), expected)
    np.testing.assert_array_equal(cursor.to_numpy(), expected[:-1])
    group.destroy()


def test_laplacian_step_moves_towards_the_neighbour_mean(ti_cpu):
    group, x, v, f = _source(1, ti.f64)
    smoother = LaplacianSmoother(x, f)
    smoother.step(0.5)
    out = x.to_numpy()
    for i in (0, 17, 41):
        ring = np.unique(f[np.any(f == i, axis=1)])
        ring = ring[ring != i]
        np.testing.assert_allclose(out[i], v[i] + 0.5 * (v[ring].mean(axis=0) - v[i]), rtol=1e-14, atol=1e-15)
    smoother.destroy()
    group.destroy()
