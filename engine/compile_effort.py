"""Which kernels compile without Taichi's advanced IR optimisation: minutes of compiling saved, no run time lost.

Taichi 1.7.4 spends most of a big kernel's compile in its own IR passes (`advanced_optimization`: store
forwarding over the control-flow graph, alias analysis, whole-kernel common subexpressions), not in LLVM or the
SPIR-V compiler, which optimise what they are given anyway. Measured on the 2-core Zen 5 (empty offline and Mesa
caches, 2026-12-05), compile time with the passes / without, then run time with / without (10 runs, medians):

| kernel | cpu compile | cpu run | vulkan compile | vulkan run |
|---|---:|---:|---:|---:|
| `raymarch.render` (the forward renderer) | 49.3 / 3.4 s | 137 / 136 ms (1024x512) | 3.8 / 0.4 s | 290 / 310 ms |
| `raymarch_grad.hold` | 85.4 / 8.4 s | 4.9 / 5.3 ms (256x128) | 6.6 / 0.8 s | (the render level) |
| `raymarch_grad.march_pixels` | 3.8 / 0.8 s | 5.7 / 5.4 ms | 0.4 / 0.2 s | (the render level) |
| `raymarch_grad.sdf_samples` adjoint (not marked) | 6.8 / 3.6 s | 3.2 / 6.1 ms | | |
| `raymarch_grad.shade_slots` adjoint (not marked) | 1.3 / 1.0 s | 2.6 / 6.4 ms | | |

So a big, branchy forward kernel is marked (`quick(archs)`, above `@ti.kernel`) for the backends where it was
measured to run as fast (the render's vulkan frame was 6 % slower: not marked there; cuda is not measured: no
kernel is marked there), and adjoints never are: Taichi's generated reverse code needs the passes (2-3x slower
without). `install()` (engine.backend.init) lowers the setting around every compile of a marked kernel's forward
mode on a marked backend, and restores it after. The setting is part of Taichi's offline-cache key
(taichi/analysis/offline_cache_util.cpp), so such a kernel is stored and found under its own setting, run after run.

    >>> import taichi as ti
    >>> @quick("cpu")
    ... @ti.kernel
    ... def double(x: ti.template()):
    ...     for i in x:
    ...         x[i] *= 2.0
    >>> is_quick(double, "cpu"), is_quick(double, "vulkan"), is_quick(double.grad, "cpu")
    (True, False, False)
"""

from typing import Any, Callable

from engine.taichi_private import AutodiffMode, Kernel, Program, materialize_key

ARCHS = {"x64": "cpu", "arm64": "cpu", "vulkan": "vulkan", "cuda": "cuda"}  # Taichi's arch name -> backend
_marked: dict[Callable, frozenset[str]] = {}  # the Python function of a marked kernel -> its backends
# id of a compiled (C++) kernel of a marked forward mode -> (that kernel, its backends): the reference keeps the id
# from being reused by another kernel once Taichi drops this one (freeing a field tree drops kernels)
_quick_kernels: dict[int, tuple[Any, frozenset[str]]] = {}
_installed = False


def quick(*archs: str) -> Callable[[Any], Any]:
    """Mark a `@ti.kernel` (this decorator goes above it): its forward mode compiles without Taichi's advanced
    optimisation on `archs` ("cpu", "vulkan", "cuda"). Its adjoint, if any, compiles as every other kernel."""
    unknown = set(archs) - set(ARCHS.values())
    if unknown or not archs:
        raise ValueError(f"quick{archs}: name one or more of {', '.join(sorted(set(ARCHS.values())))}")

    def mark(kernel: Any) -> Any:
        _marked[_kernel(kernel).func] = frozenset(archs)
        return kernel
    return mark


def is_quick(kernel: Any, arch: str) -> bool:
    """Whether `kernel` (a `@ti.kernel`, or its `.grad`) compiles without the advanced optimisation on `arch`."""
    k = _kernel(kernel)
    return k.autodiff_mode == AutodiffMode.NONE and arch in _marked.get(k.func, ())


def _kernel(kernel: Any) -> Kernel:
    """The `Kernel` of a `@ti.kernel` function (its forward mode) or the `Kernel` itself (a `.grad`)."""
    return kernel if isinstance(kernel, Kernel) else kernel._primal


def _materialize(kernel, key=None, args=None, arg_features=None):
    _next_materialize(kernel, key, args, arg_features)
    if kernel.autodiff_mode == AutodiffMode.NONE and kernel.func in _marked:
        compiled = kernel.compiled_kernels[materialize_key(kernel, key)]
        _quick_kernels[id(compiled)] = (compiled, _marked[kernel.func])


def _compile(program, config, caps, t_kernel):
    archs = _quick_kernels.get(id(t_kernel), (None, ()))[1]
    if ARCHS.get(config.arch.name) not in archs or not config.advanced_optimization:
        return _next_compile(program, config, caps, t_kernel)
    config.advanced_optimization = False
    try:
        return _next_compile(program, config, caps, t_kernel)
    finally:
        config.advanced_optimization = True


def install() -> None:
    """Compile marked kernels without the advanced optimisation from now on (idempotent; after
    `engine.kernel_count.install`, whose wrappers these call)."""
    global _installed, _next_materialize, _next_compile
    if _installed:
        return
    _next_materialize, _next_compile = Kernel.materialize, Program.compile_kernel
    Kernel.materialize, Program.compile_kernel = _materialize, _compile
    _installed = True


_next_materialize: Callable = Kernel.materialize
_next_compile: Callable = Program.compile_kernel
