"""gradcheck: central differences in float64 against the taped gradient, for one or several fields."""
import numpy as np
import pytest
import taichi as ti

from engine.autodiff.gradcheck import compare_gradients, finite_difference_gradient, gradcheck
from engine.fields import FieldGroup
from engine.kernels.elementwise import affine, sum_into
from engine.kernels.losses import l2_loss
from engine.launch import custom, launch
from tests.conftest import OTHER_ARCHS
from tests.test_tape import cube_by_loop


@ti.kernel
def wrong_cube_adjoint(x: ti.template(), y: ti.template()):
    for i in x:
        x.grad[i] += 2.0 * x[i] * x[i] * y.grad[i]  # should be 3 x^2


def test_finite_differences_of_a_host_function():
    x = np.array([0.5, -1.0, 2.0])
    grad = finite_difference_gradient(lambda v: float(np.sum(v ** 3)), x, eps=1e-5)
    np.testing.assert_allclose(grad, 3 * x ** 2, rtol=1e-9)


def test_several_vector_inputs(ti_cpu):
    group = FieldGroup()
    x = group.vector(3, ti.f64, (7,), needs_grad=True)
    target = group.vector(3, ti.f64, (7,), needs_grad=True)
    loss = group.field(ti.f64, (), needs_grad=True)
    group.finalize()
    rng = np.random.default_rng(4)
    x.from_numpy(rng.normal(size=(7, 3)))
    target.from_numpy(rng.normal(size=(7, 3)))
    before = x.to_numpy()

    def forward() -> None:
        loss.fill(0)
        launch(l2_loss, x, target, loss)

    report = gradcheck(forward, [x, target], loss, eps=1e-6, atol=1e-8, rtol=1e-7)
    assert report.passed and report.max_abs_err < 1e-8, report
    assert report.worst_input in (0, 1) and len(report.worst_index) == 2
    np.testing.assert_array_equal(x.to_numpy(), before)  # inputs restored
    group.destroy()


def test_a_wrong_custom_backward_is_caught_at_its_worst_element(ti_cpu):
    group = FieldGroup()
    x, y, z = (group.field(ti.f64, (5,), needs_grad=True) for _ in range(3))
    loss = group.field(ti.f64, (), needs_grad=True)
    group.finalize()
    x.from_numpy(np.array([0.1, -0.4, 0.9, -0.2, 0.3]))

    def forward() -> None:
        loss.fill(0)
        launch(affine, x, y, 2.0, 0.5)
        custom("cube", lambda: launch(cube_by_loop, y, z), lambda: launch(wrong_cube_adjoint, y, z),
               reads=[y], writes=[z])
        launch(sum_into, z, loss)

    report = gradcheck(forward, [x], loss)
    assert not report.passed
    assert report.worst_index == (2,)  # largest (2x + 0.5)^2: the error 2 (2x + 0.5)^2 peaks there
    assert report.max_abs_err == pytest.approx(2 * (2 * 0.9 + 0.5) ** 2, rel=1e-6)
    group.destroy()


def test_float32_fields_are_refused(ti_cpu):
    group = FieldGroup()
    x = group.field(ti.f32, (3,), needs_grad=True)
    loss = group.field(ti.f64, (), needs_grad=True)
    group.finalize()
    with pytest.raises(ValueError, match="gradcheck: input 0 is f32, not f64; instantiate the same kernels on float64"):
        gradcheck(lambda: None, [x], loss)
    group.destroy()


def test_compare_gradients_reports_the_worst_element():
    report = compare_gradients(np.array([[1.0, 2.0], [3.0, 4.5]]), np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert not report.passed and report.worst_index == (1, 1) and report.max_abs_err == 0.5


def l2_gradcheck_here(x: np.ndarray, target: np.ndarray) -> dict:
    """gradcheck of l2_loss over vector fields on whichever backend runs this (a worker)."""
    group = FieldGroup()
    xf = group.vector(3, ti.f64, (len(x),), needs_grad=True)
    tf = group.vector(3, ti.f64, (len(x),), needs_grad=True)
    loss = group.field(ti.f64, (), needs_grad=True)
    group.finalize()
    xf.from_numpy(x)
    tf.from_numpy(target)

    def forward() -> None:
        loss.fill(0)
        launch(l2_loss, xf, tf, loss)

    report = gradcheck(forward, [xf, tf], loss, eps=1e-6, atol=1e-8, rtol=1e-7)
    group.destroy()
    return {"passed": np.array(report.passed), "max_abs_err": np.array(report.max_abs_err)}


@pytest.mark.parametrize("arch", OTHER_ARCHS)
def test_gradcheck_runs_in_float64_on_other_backends(arch):
    """Vulkan has f64 arithmetic (not f64 sin/cos: see docs/DESIGN.md), enough for the L2 loss."""
    from tests.conftest import backend_worker

    rng = np.random.default_rng(5)
    out = backend_worker(arch).call("tests.test_gradcheck:l2_gradcheck_here", x=rng.normal(size=(4, 3)),
                                        target=rng.normal(size=(4, 3)))
    assert bool(out["passed"]) and float(out["max_abs_err"]) < 1e-8
