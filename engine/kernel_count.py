"""How many Taichi kernels this process has prepared: the k of "compiling kernels (k of n)".

Taichi prepares a kernel on its first launch (one per template instantiation; an adjoint is a
kernel of its own): it walks the Python AST into IR, then compiles the IR or loads the
result from its offline cache. The first call of a piece of work (the desktop app's first
frame, its first inverse render) waits on a run of these, seconds each when they load and up
to a minute each when they compile, so the number begun so far is what a status can show
while it waits. Its n is what the same call counted in an earlier run
(`app/ui/kernel_manifest.json`, checked by the window test).

`install()` (called by `engine.backend.init`) wraps `Kernel.materialize`, which Taichi calls
before every plain launch and which returns at once for an instance it has prepared;
`share(value)` mirrors the count into a `multiprocessing.Value`, so the process that started a
worker reads it while the worker is inside a call (`engine.worker.BackendWorker.kernels_prepared`).

    >>> import taichi as ti
    >>> from engine import backend, kernel_count
    >>> _ = backend.init("cpu")
    >>> @ti.kernel
    ... def seven() -> ti.i32:
    ...     return 7
    >>> before = kernel_count.prepared()
    >>> seven(), seven(), kernel_count.prepared() - before   # prepared once, launched twice
    (7, 7, 1)
"""

from typing import Any

from engine import progress
from engine.taichi_private import AutodiffMode, Kernel, Program, materialize_key

_count = 0
_shared: Any = None  # a multiprocessing Value ("i") the parent reads, or None
_uncompiled: dict[int, tuple[int, str]] = {}  # id of a prepared C++ kernel not yet compiled -> (k, its name)
_original_materialize = Kernel.materialize
_original_compile = Program.compile_kernel


def prepared() -> int:
    """Kernel instances this process has begun to prepare (compile or load) since it started."""
    return _count


def share(value: Any) -> None:
    """Mirror the count into `value` (a `multiprocessing.Value("i")`) from now on."""
    global _shared
    _shared = value
    value.value = _count


def _counting_materialize(kernel, key=None, args=None, arg_features=None):
    global _count
    key = materialize_key(kernel, key)
    if key in kernel.compiled_kernels:
        return _original_materialize(kernel, key, args, arg_features)
    _count += 1
    if _shared is not None:
        _shared.value = _count
    _original_materialize(kernel, key, args, arg_features)
    name = kernel.func.__name__ + (" adjoint" if kernel.autodiff_mode == AutodiffMode.REVERSE else "")
    _uncompiled[id(kernel.compiled_kernels[key])] = (_count, name)


def _watched_compile(program, config, caps, t_kernel):
    """Taichi's compile (every plain launch asks; only the first compiles or loads): the first said on the terminal."""
    first = _uncompiled.pop(id(t_kernel), None) if _uncompiled else None
    if first is None:
        return _original_compile(program, config, caps, t_kernel)
    with progress.kernel_compiling(*first):
        return _original_compile(program, config, caps, t_kernel)


def install() -> None:
    """Count from now on, and say on the terminal which kernel compiles (idempotent)."""
    Kernel.materialize = _counting_materialize
    Program.compile_kernel = _watched_compile
