"""engine.compile_effort: marked forward kernels compile without Taichi's advanced optimisation, nothing else does.

The saving itself (minutes to seconds) and the run times are measured, not tested (the module's docstring,
docs/RESULTS.md); what is tested is the mechanism the saving rests on: which compiles see the setting lowered, and that it is
restored. That Taichi keys its offline cache on the setting is a Taichi contract (tests/test_taichi_contract.py).
"""

import numpy as np
import pytest
import taichi as ti

from engine import compile_effort, taichi_private


@compile_effort.quick("cpu")
@ti.kernel
def doubled(x: ti.template(), y: ti.template()):
    for i in x:
        y[i] = 2.0 * x[i]


@ti.kernel
def tripled(x: ti.template(), y: ti.template()):
    for i in x:
        y[i] = 3.0 * x[i]


@compile_effort.quick("vulkan")
@ti.kernel
def quadrupled(x: ti.template(), y: ti.template()):
    for i in x:
        y[i] = 4.0 * x[i]


def test_only_a_marked_forward_kernel_on_a_marked_backend_compiles_without_the_passes(ti_cpu, monkeypatch):
    seen = []

    def spy(program, config, caps, t_kernel):
        seen.append(config.advanced_optimization)
        return original(program, config, caps, t_kernel)

    original = compile_effort._next_compile
    monkeypatch.setattr(compile_effort, "_next_compile", spy)
    x, y = ti.field(ti.f32, 4, needs_grad=True), ti.field(ti.f32, 4, needs_grad=True)
    x.from_numpy(np.arange(4, dtype=np.float32))
    expected = {"doubled": False, "doubled.grad": True, "tripled": True, "quadrupled (marked for vulkan)": True}
    found = {}
    for name, launch in (("doubled", lambda: doubled(x, y)), ("doubled.grad", lambda: doubled.grad(x, y)),
                         ("tripled", lambda: tripled(x, y)), ("quadrupled (marked for vulkan)", lambda: quadrupled(x, y))):
        seen.clear()
        launch()
        found[name] = seen[0]
        assert taichi_private.config().advanced_optimization, f"{name}: the setting was not restored"
    assert found == expected
    doubled(x, y)
    np.testing.assert_array_equal(y.to_numpy(), 2.0 * np.arange(4))


def test_marks_say_where_they_apply():
    assert compile_effort.is_quick(doubled, "cpu") and not compile_effort.is_quick(doubled, "vulkan")
    assert not compile_effort.is_quick(doubled.grad, "cpu") and not compile_effort.is_quick(tripled, "cpu")
    with pytest.raises(ValueError, match="name one or more of cpu, cuda, vulkan"):
        compile_effort.quick("gpu")


def test_the_renderers_big_forward_kernels_are_marked_and_their_adjoints_are_not():
    from engine.kernels import raymarch, raymarch_grad

    for kernel in (raymarch_grad.hold, raymarch_grad.march_pixels):
        assert compile_effort.is_quick(kernel, "cpu") and compile_effort.is_quick(kernel, "vulkan")
    assert compile_effort.is_quick(raymarch.render, "cpu") and not compile_effort.is_quick(raymarch.render, "vulkan")
    for kernel in (raymarch_grad.sdf_samples.grad, raymarch_grad.shade_slots.grad):
        assert not compile_effort.is_quick(kernel, "cpu")

