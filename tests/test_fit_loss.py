"""The fit's loss interface (engine.fit_loss): the edge-length term against a naive numpy implementation and its
gradient against float64 central differences, bit-reproducibility, the weighted sum against a hand sum, the
default (Chamfer alone) unchanged bit for bit, and the settings and flags built from the one table of terms."""
import numpy as np
import pytest
import taichi as ti

from app.scenes.fit_settings import DEFAULT_WEIGHTS, LOSS_TERMS, FitSettings
from engine.autodiff.gradcheck import compare_gradients, finite_difference_gradient
from engine.autodiff.tape import Tape
from engine.chamfer_loss import ChamferLoss
from engine.edge_loss import EdgeLengthLoss
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.fit_loss import Loss, WeightedSum
from engine.mesh_io import make_mesh
from engine.meshgen import blob, icosphere


def _mesh(subdiv: int, dtype, seed: int = 0):
    v, f = icosphere(subdiv)
    v = v * (0.8 + 0.4 * np.random.default_rng(seed).random((len(v), 1)))  # uneven edges
    group = FieldGroup()
    x = group.vector(3, dtype, (len(v),), needs_grad=True)
    group.finalize()
    x.from_numpy(v.astype(np.float64 if dtype == ti.f64 else np.float32))
    return group, x, x.to_numpy().astype(np.float64), f


def _evaluate(loss: Loss) -> tuple[float, np.ndarray]:
    tape = Tape()
    with tape:
        loss.correspond()
        loss.record(tape)
    tape.backward(loss.value)
    value, grad = float(loss.value[None]), loss.x.grad.to_numpy()
    tape.reset()
    return value, grad


def naive_edge_loss(vertices: np.ndarray, faces: np.ndarray) -> float:
    """PyTorch3D's mesh_edge_loss (target length 0) for one mesh, written out: each edge once, its squared length."""
    edges = {tuple(sorted((int(face[k]), int(face[(k + 1) % 3])))) for face in faces for k in range(3)}
    return sum(float(np.sum((vertices[a] - vertices[b]) ** 2)) for a, b in edges) / len(edges)


@pytest.mark.parametrize("dtype, rel", [(ti.f64, 1e-13), (ti.f32, 1e-6)])
def test_edge_loss_matches_a_naive_implementation(ti_cpu, dtype, rel):
    group, x, v, f = _mesh(2, dtype)
    loss = EdgeLengthLoss(x, f)
    assert loss.n_edges == 3 * len(f) // 2  # a closed mesh: each edge in two faces
    assert _evaluate(loss)[0] == pytest.approx(naive_edge_loss(v, f), rel=rel)
    loss.destroy()
    group.destroy()


def test_edge_loss_gradient_matches_central_differences_float64(ti_cpu):
    group, x, v, f = _mesh(1, ti.f64)
    loss = EdgeLengthLoss(x, f)

    def value(points: np.ndarray) -> float:
        x.from_numpy(points)
        return _evaluate(loss)[0]

    numeric = finite_difference_gradient(value, v, eps=1e-6)
    x.from_numpy(v)
    analytic = _evaluate(loss)[1]
    report = compare_gradients(analytic, numeric, atol=1e-9, rtol=1e-6)
    assert report.passed, report
    loss.destroy()
    group.destroy()


def test_edge_loss_and_gradient_are_bit_reproducible(ti_cpu):
    results = []
    for _ in range(2):
        group, x, _, f = _mesh(4, ti.f32)  # 30,720 edges: many threads per vertex's neighbourhood
        loss = EdgeLengthLoss(x, f)
        results += [_evaluate(loss), _evaluate(loss)]
        loss.destroy()
        group.destroy()
    (value, grad), *others = results
    for other_value, other_grad in others:
        assert other_value == value
        np.testing.assert_array_equal(other_grad, grad)


def test_weighted_sum_is_the_hand_sum_of_its_terms(ti_cpu):
    group, x, v, f = _mesh(2, ti.f32)
    chamfer = ChamferLoss(x, f, make_mesh(*blob(2)), n_samples=500)
    edge = EdgeLengthLoss(x, f)
    alone = {"chamfer": _evaluate(chamfer), "edge": _evaluate(edge)}
    loss = WeightedSum([(0.7, chamfer), (0.3, edge)])
    tape = Tape()
    with tape:
        loss.correspond()
        loss.record(tape)
    tape.backward(loss.value)
    total, grad = float(loss.value[None]), x.grad.to_numpy()
    # the kernel's order: 0, then + 0.7 c, then + 0.3 e, each product and sum rounded to float32
    c, e = np.float32(alone["chamfer"][0]), np.float32(alone["edge"][0])
    hand = np.float32(np.float32(0) + np.float32(np.float32(0.7) * c)) + np.float32(np.float32(0.3) * e)
    assert total == float(hand)
    np.testing.assert_allclose(grad, 0.7 * alone["chamfer"][1] + 0.3 * alone["edge"][1], rtol=1e-5, atol=1e-7)
    assert loss.misses() == 0
    loss.destroy()
    group.destroy()


def test_the_default_fit_is_chamfer_alone_bit_for_bit(ti_cpu):
    """A sum of one term of weight 1 is that term: the fit's loss and gradient are Chamfer's, to the last bit."""
    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit("blob", subdiv=1, lr=0.03, n_samples=300)
    assert list(fit.terms) == ["chamfer"] and fit.weights == DEFAULT_WEIGHTS
    chamfer, tape = fit.terms["chamfer"], fit.tape
    for _ in range(6):
        fit.step()
        assert fit.losses[-1] == float(chamfer.value[None])
        looked = fit.gradient()
        tape.reset()  # x.grad zeroed: the term alone below, on the same tape
        with tape:
            chamfer.correspond(look=True)
            chamfer.record(tape)
        tape.backward(chamfer.value)
        np.testing.assert_array_equal(fit.x.grad.to_numpy(), looked)
    fit.destroy()


def test_a_fit_with_the_edge_term_records_both_and_falls(ti_cpu):
    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit("blob", subdiv=1, lr=0.02, smooth=0.1, n_samples=512, losses={"chamfer": 1.0, "edge": 0.1})
    for _ in range(20):
        fit.step()
    names = [entry.name for entry in fit.tape.entries]
    assert list(fit.terms) == ["chamfer", "edge"] and fit.weights == {"chamfer": 1.0, "edge": 0.1}
    assert "edge: mean" in names and names.count("loss: weighted sum") == 1  # one launch adds every term
    assert fit.losses[-1] < 0.7 * fit.losses[0], fit.losses
    fit.destroy()


@pytest.mark.parametrize("losses, words", [
    ({"chamfer": 1.0, "edges": 0.1}, "unknown loss term 'edges'"),
    ({"edge": -1.0}, "--edge-weight must be a number >= 0"),
    ({"chamfer": 0.0}, "every loss weight is 0"),
])
def test_bad_weights_are_refused_before_anything_is_allocated(losses, words):
    from app.scenes.shape_fit import ShapeFit

    with pytest.raises(UserError, match=words):
        ShapeFit("blob", losses=losses)
    with pytest.raises(UserError, match=words):
        FitSettings("blob", weights=losses).validate()


def test_every_term_in_the_table_has_its_flag_setting_and_fit_json_field():
    from app.flags import OneLineParser
    from app.scenes import fit_cli

    parser = OneLineParser(prog="fit")
    fit_cli.add_arguments(parser)
    flags = [f"--{term.name}-weight" for term in LOSS_TERMS]
    args = parser.parse_args(["--target", "blob", *[item for flag in flags for item in (flag, "0.25")]])
    settings = fit_cli.settings_from(args)
    assert settings.weights == {term.name: 0.25 for term in LOSS_TERMS}
    assert fit_cli.settings_from(parser.parse_args(["--target", "blob"])).weights == DEFAULT_WEIGHTS
    record = {"target": "blob", "weights": {"edge": 0.5}}  # a term a fit.json does not name keeps its default
    assert FitSettings.from_record(record).weights == {**DEFAULT_WEIGHTS, "edge": 0.5}
