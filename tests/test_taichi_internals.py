"""The private Taichi 1.7.4 entry points engine/dispatch.py relies on, exercised one by one.

Native dispatch reaches under `Kernel.__call__`. If a Taichi upgrade renames, moves or
changes any of these, this file fails with the name of what changed, before a binding
launches something wrong. Pinned: taichi==1.7.4 (see tests/test_taichi_contract.py).
"""
import ctypes
import inspect

import numpy as np
import taichi as ti

from engine.taichi_private import AutodiffMode, BoundedDifferentiableMethod, Kernel, get_runtime

LAUNCH_CONTEXT_SETTERS = ("set_arg_float", "set_arg_int", "set_arg_uint", "set_struct_arg_float",
                          "set_struct_arg_int", "set_struct_arg_uint", "set_arg_ndarray",
                          "set_arg_ndarray_with_grad", "set_arg_external_array_with_shape",
                          "get_struct_ret_float")


@ti.kernel
def axpy(x: ti.template(), a: ti.f32, v: ti.math.vec2, out: ti.types.ndarray(dtype=ti.f32, ndim=1)) -> ti.f32:
    for i in x:
        out[i] = a * x[i] + v[1]
    return a


@ti.data_oriented
class Owner:
    @ti.kernel
    def scale(self, x: ti.template(), a: ti.f32):
        for i in x:
            x[i] *= a


def test_taichi_is_pinned():
    assert ti.__version__ == (1, 7, 4), "engine/dispatch.py relies on taichi 1.7.4 internals: re-verify them"


def test_kernel_objects_and_their_attributes(ti_cpu):
    assert isinstance(axpy._primal, Kernel) and isinstance(axpy._adjoint, Kernel)
    assert axpy.grad is axpy._adjoint and axpy._primal.grad is axpy._adjoint
    assert axpy._primal.autodiff_mode == AutodiffMode.NONE and axpy._adjoint.autodiff_mode == AutodiffMode.REVERSE
    names = [argument.name for argument in axpy._primal.arguments]
    assert names == ["x", "a", "v", "out"]
    assert isinstance(axpy._primal.arguments[0].annotation, ti.template().__class__)
    for attribute in ("ensure_compiled", "compiled_kernels", "mapper", "has_print", "return_type",
                      "construct_kernel_ret", "func"):
        assert hasattr(axpy._primal, attribute), f"Kernel.{attribute} is gone"
    assert hasattr(axpy._primal.mapper, "extract_arg")
    assert list(inspect.signature(Kernel.ensure_compiled).parameters) == ["self", "args"]
    method = Owner().scale
    assert isinstance(method, BoundedDifferentiableMethod)
    for attribute in ("_primal", "_adjoint", "_kernel_owner", "_is_staticmethod", "grad"):
        assert hasattr(method, attribute), f"BoundedDifferentiableMethod.{attribute} is gone"
    runtime = get_runtime()
    assert hasattr(runtime, "target_tape") and hasattr(runtime, "fwd_mode_manager")


def test_compile_and_launch_through_the_runtime(ti_cpu):
    """The exact sequence a binding performs, checked against analytic values."""
    x = ti.field(ti.f32, 4)
    x.from_numpy(np.arange(4, dtype=np.float32))
    out = ti.ndarray(ti.f32, 4)
    kern = axpy._primal
    key = kern.ensure_compiled(x, 2.0, ti.math.vec2(0.0, 0.5), out)
    t_kernel = kern.compiled_kernels[key]
    prog = get_runtime().prog
    compiled = prog.compile_kernel(prog.config(), prog.get_device_caps(), t_kernel)
    ctx = t_kernel.make_launch_context()
    for setter in LAUNCH_CONTEXT_SETTERS:
        assert hasattr(ctx, setter), f"KernelLaunchContext.{setter} is gone"
    ctx.set_arg_float((0,), 2.0)
    ctx.set_struct_arg_float((1, 0), 0.0)
    ctx.set_struct_arg_float((1, 1), 0.5)
    ctx.set_arg_ndarray((2,), out.arr)
    prog.launch_kernel(compiled, ctx)
    ti.sync()
    np.testing.assert_array_equal(out.to_numpy(), 2.0 * np.arange(4) + 0.5)
    assert kern.construct_kernel_ret(ctx, kern.return_type[0], (0,)) == 2.0
    assert kern.has_print is False


def test_ndarray_host_pointer_is_its_memory_on_cpu(ti_cpu):
    """On the CPU a binding passes ndarrays as raw host pointers (engine/dispatch.py: _array_writer)."""
    prog = get_runtime().prog
    out = ti.ndarray(ti.f32, 4)
    out.from_numpy(np.array([1, 2, 3, 4], np.float32))
    pointer = prog.get_ndarray_data_ptr_as_int(out.arr)
    assert out.arr.element_size() * out.arr.nelement() == 16
    view = np.ctypeslib.as_array((ctypes.c_float * 4).from_address(pointer))
    np.testing.assert_array_equal(view, [1, 2, 3, 4])


def test_the_runtime_program_exists_only_between_init_and_reset():
    # engine.backend.require tells "no backend yet" by the runtime's program (a clear error instead
    # of Taichi's C++ assertion); ti.init creates it and ti.reset drops it
    import subprocess
    import sys

    probe = ("import taichi as ti\nfrom engine.taichi_private import program\nprint(program() is None)\n"
             "ti.init(arch=ti.cpu)\nprint(program() is None)\nti.reset()\nprint(program() is None)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert [word for word in result.stdout.split() if word in ("True", "False")] == ["True", "False", "True"]
