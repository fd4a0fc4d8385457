"""engine.fields.FieldGroup: a field's memory order (`order`) changes where its elements lie, never how they are
indexed."""
import numpy as np
import pytest
import taichi as ti

from engine.fields import FieldGroup


@ti.kernel
def _scaled_copy(src: ti.template(), dst: ti.template()):
    for I in ti.grouped(src):
        dst[I] = 2.0 * src[I]


def test_an_ordered_field_is_indexed_as_a_row_major_one(ti_cpu):
    g = FieldGroup()
    plain = g.vector(3, ti.f32, (5, 6))
    ordered = g.vector(3, ti.f32, (5, 6), needs_grad=True, order=(1, 0))
    cube = g.field(ti.f32, (5, 6, 4), order=(1, 0, 2))
    cube_plain = g.field(ti.f32, (5, 6, 4))
    g.finalize()
    try:
        values = np.arange(5 * 6 * 3, dtype=np.float32).reshape(5, 6, 3)
        plain.from_numpy(values)
        _scaled_copy(plain, ordered)
        np.testing.assert_array_equal(ordered.to_numpy(), 2.0 * values)
        np.testing.assert_array_equal(ordered.grad.to_numpy(), 0.0)
        assert ordered[4, 1][2] == 2.0 * values[4, 1, 2]
        cube.from_numpy(np.arange(120, dtype=np.float32).reshape(5, 6, 4))
        _scaled_copy(cube, cube_plain)
        np.testing.assert_array_equal(cube_plain.to_numpy(), 2.0 * np.arange(120).reshape(5, 6, 4))
        # the axis named first is outermost: sample-major, each j a contiguous block of the first axis
        assert str(ordered.snode.parent()) == "ti.root => dense [6] => dense [5, 6]"
        assert str(ordered.grad.snode.parent()) == str(ordered.snode.parent())
        assert str(plain.snode.parent()) == "ti.root => dense [5, 6]"
    finally:
        g.destroy()


@pytest.mark.parametrize("order", [(0,), (0, 0), (1, 2)])
def test_an_order_must_name_each_axis_once(ti_cpu, order):
    g = FieldGroup()
    with pytest.raises(ValueError, match="must list the axes"):
        g.field(ti.f32, (5, 6), order=order)
    g.field(ti.f32, (5, 6), order=(1, 0))  # the group stays usable (Taichi refuses kernels while a builder is open)
    g.finalize().destroy()


@pytest.mark.parametrize("order", [None, (1, 0)])
def test_a_counted_fill_sets_exactly_the_first_rows_in_either_order(ti_cpu, order):
    from engine.autodiff.grad_kernels import fill_counted_rows, fill_rows
    from engine.launch import dispatch

    g = FieldGroup()
    samples = g.vector(3, ti.f32, (7, 6), order=order)
    count = g.field(ti.i32, ())
    g.finalize()
    try:
        samples.from_numpy(np.ones((7, 6, 3), np.float32))
        count[None] = 3
        dispatch(fill_counted_rows, (samples, count, 0.0))
        expected = np.ones((7, 6, 3), np.float32)
        expected[:3] = 0.0
        np.testing.assert_array_equal(samples.to_numpy(), expected)
        dispatch(fill_rows, (samples, 5, 2.0))
        expected[:5] = 2.0
        np.testing.assert_array_equal(samples.to_numpy(), expected)
    finally:
        g.destroy()
