"""Taichi's private API, in one place: the upgrade-audit point for taichi==1.7.4.

This is the only module of the project that imports `taichi.lang` or `taichi._lib` (Taichi's
internals, which it may rename, move or change in any release); everything else reads them
through the names below. `tests/test_taichi_contract.py` checks that every name here exists and
behaves as the project relies on, and that no other module (engine, app, bench, examples,
scripts, tests) imports or reaches `taichi.lang` / `taichi._lib` itself, so before upgrading
Taichi, read this module and run that file.

Who relies on what:

- `engine.dispatch` (native launches under `Kernel.__call__`): `Kernel`,
  `BoundedDifferentiableMethod`, `AutodiffMode`, `Layout`, `Ndarray`, `MatrixType`, `StructType`,
  `cook_dtype`, `get_runtime` (its `prog`, `target_tape`, `fwd_mode_manager`; the object itself
  marks one Taichi program), `config` (`opt_level` raised for gradient kernels, `arch`);
  `tests/test_taichi_internals.py` exercises the runtime entry points behind them.
- `engine.kernel_source_info` (memoised kernel loading): the `kernel_impl` module and
  `ASTTransformerContext`, whose functions it replaces.
- `engine.fields` (`FieldGroup.destroy` puts back kernels): `kernels`, `CoreSNode`, `arch`.
- `engine.autodiff` (tape, optimisers) and `engine.kernels.losses`: `Field`, `MatrixField`, `Ndarray`.
- `engine.kernels.lanes` (packets of rays): `is_tensor_expr`.
- `engine.kernel_count` (kernels prepared, compiles said on the terminal) and `engine.compile_effort` (kernels
  compiled without Taichi's advanced passes): `Kernel.materialize` and `Program.compile_kernel`, which they wrap,
  and `materialize_key`.
- `engine.backend`: `arch`, `program`, `default_offline_cache_dir`; `engine.cpu_pool`, the
  benchmarks and tests: `arch`, `cpu_threads`, `config`.

Importing this module imports Taichi (not a backend): keep imports of it inside functions in the
modules that must stay Taichi-free at import (`engine.backend`).
"""
from __future__ import annotations

from typing import Any

from taichi._lib import core as _core
from taichi.lang import impl as _impl
from taichi.lang import kernel_impl
from taichi.lang._ndarray import Ndarray
from taichi.lang.ast.ast_transformer_utils import ASTTransformerContext
from taichi.lang.enums import AutodiffMode, Layout
from taichi.lang.expr import Expr as _Expr
from taichi.lang.field import Field
from taichi.lang.kernel_impl import Kernel
from taichi.lang.kernel_impl import _BoundedDifferentiableMethod as BoundedDifferentiableMethod
from taichi.lang.matrix import MatrixField, MatrixType
from taichi.lang.struct import StructType
from taichi.lang.util import cook_dtype

__all__ = [
    "ASTTransformerContext", "AutodiffMode", "BoundedDifferentiableMethod", "CoreSNode", "Field", "Kernel", "Layout",
    "MatrixField", "MatrixType", "Ndarray", "Program", "StructType", "arch", "config", "cook_dtype", "cpu_threads",
    "default_offline_cache_dir", "get_runtime", "is_tensor_expr", "kernel_impl", "kernels", "materialize_key",
    "memory_order", "program",
]

CoreSNode = _core.SNode  # the C++ SNode (a `Field`'s `.snode.ptr`), as a kernel's template key may hold it
Program = _core.Program  # the C++ program: every launch asks its `compile_kernel` for the compiled kernel

# The process's Taichi runtime (`PyTaichi`): `ti.reset()` replaces it by a new object, so the object
# itself identifies one program (engine.dispatch compares it with `is` on every launch: a bare name).
get_runtime = _impl.get_runtime


def config() -> Any:
    """The running program's compile config (`CompileConfig`: `arch`, `opt_level`, `cpu_max_num_threads`, ...).

    Writable: engine.dispatch raises `opt_level` for gradient kernels as `Kernel.__call__` does."""
    return _impl.current_cfg()


def arch() -> Any:
    """The arch the running program was started on (`ti.x64`/`ti.arm64` on the CPU, `ti.cuda`, `ti.vulkan`)."""
    return _impl.current_cfg().arch


def is_tensor_expr(value: Any) -> bool:
    """(While a kernel compiles) whether a Taichi-scope value is a vector or matrix rather than one number: since
    Taichi 1.5 a vector in a kernel is an `Expr` of tensor type, not a `Matrix` of scalar Exprs."""
    return isinstance(value, _Expr) and value.ptr.is_tensor()


def cpu_threads() -> int:
    """The number of threads of the running program's CPU pool (`TI_CPU_MAX_NUM_THREADS` caps it)."""
    return _impl.current_cfg().cpu_max_num_threads


def program() -> Any:
    """The running Taichi program: None before `ti.init` and after `ti.reset`."""
    return _impl.get_runtime().prog


def kernels() -> list:
    """Every `Kernel` defined in this process (Taichi keeps them across `ti.reset`)."""
    return _impl.get_runtime().kernels


def materialize_key(kernel: Kernel, key: Any = None) -> Any:
    """The key of `kernel.compiled_kernels` that `Kernel.materialize(kernel, key)` fills: `key`, or Taichi's own
    default when it is None (a kernel without template arguments)."""
    return key if key is not None else (kernel.func, 0, kernel.autodiff_mode)


def default_offline_cache_dir() -> str:
    """Taichi's default folder for its offline kernel cache (`TI_OFFLINE_CACHE_FILE_PATH` overrides it in ti.init)."""
    return _impl.default_cfg().offline_cache_file_path


def memory_order(field: Any) -> tuple[int, ...]:
    """A dense field's axes as laid out in memory, outermost first: (0, 1, ...) for row-major; (1, 0) for a
    field placed axis 1 outside axis 0 (engine.fields.FieldGroup's `order`). Read from its SNodes' index
    positions, from the root down."""
    chain, node = [], field.snode.parent()
    while node is not None and node.parent() is not None:
        chain.append(node)
        node = node.parent()
    order: list[int] = []
    for node in reversed(chain):
        order += [axis for axis in node._physical_index_position().values() if axis not in order]
    return tuple(order)

