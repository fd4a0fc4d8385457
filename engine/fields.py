"""Field groups: Taichi fields allocated together and freed together.

Why fields and not ndarrays: Taichi 1.7.4's reverse-mode autodiff on ndarrays is
silently wrong on Vulkan (gradients stay zero; taichi issue #8524, checked in
tests/test_taichi_contract.py), while fields differentiate correctly on every
backend. To keep several independent problems in one process (the GUI runs a fit
beside a ray march) every problem owns a `FieldGroup`: one SNode tree, destroyed
as a whole. Kernels take fields as `ti.template()` arguments, so one kernel source
serves every group (Taichi instantiates it once per distinct field set).

On Vulkan a group (one SNode tree, one storage buffer) holds at most VULKAN_MAX_BYTES: the
spec's guaranteed `maxStorageBufferRange`, and lavapipe's. Beyond it lavapipe does not fail:
measured, a write to the differentiable renderer's last fields (a 200 MB group) landed on one of
its first ones (the camera's pixel size), silently. `finalize` refuses such a group; split it.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import taichi as ti

from engine import backend, taichi_private
from engine.errors import UserError

_TAICHI_DTYPES = {np.dtype(np.float32): ti.f32, np.dtype(np.float64): ti.f64}
VULKAN_MAX_BYTES = 2 ** 27  # 128 MiB (see the module docstring)


def taichi_float(dtype: np.dtype) -> Any:
    """The Taichi float type of a numpy float32/float64 dtype."""
    return _TAICHI_DTYPES[np.dtype(dtype)]


class FieldGroup:
    """Declare fields, `finalize()` to allocate them, `destroy()` to free them.

        group = FieldGroup()
        x = group.field(ti.f32, (1024,), needs_grad=True)
        points = group.vector(3, ti.f32, (642,))
        group.finalize()
    """

    def __init__(self) -> None:
        backend.require()  # Taichi's own failure here is a C++ assertion about its program
        self._builder = ti.FieldsBuilder()
        self._tree: Any = None
        self.nbytes = 0  # what the declared fields (and their gradients) take
        self._fields: list[Any] = []  # every field placed here and its gradient: what `destroy` frees

    def _place(self, field: Any, shape: tuple[int, ...], needs_grad: bool, order: tuple[int, ...] | None) -> Any:
        if self._tree is not None:
            raise RuntimeError("FieldGroup is finalized: declare every field before finalize()")
        if any(n <= 0 for n in shape):
            raise ValueError(f"field shape {shape} must be positive")
        if order is None:
            parent = self._builder.dense(ti.axes(*range(len(shape))), shape) if shape else self._builder
        else:
            parent = self._builder
            for axis in order:  # outermost first: the last axis named varies fastest in memory
                parent = parent.dense(ti.axes(axis), shape[axis])
        parent.place(field, field.grad) if needs_grad else parent.place(field)
        self._fields += [field, field.grad] if needs_grad else [field]
        self.nbytes += int(np.prod(shape, dtype=np.int64)) * self._item_bytes(field) * (2 if needs_grad else 1)
        return field

    @staticmethod
    def _item_bytes(field: Any) -> int:
        lanes = getattr(field, "n", 1) * getattr(field, "m", 1)
        return lanes * (8 if field.dtype in (ti.f64, ti.i64, ti.u64) else 4)

    def field(self, dtype: Any, shape: tuple[int, ...] = (), needs_grad: bool = False,
              order: tuple[int, ...] | None = None) -> Any:
        """A scalar field (and its gradient, with `needs_grad`). `order`: the axes' nesting in memory, outermost
        first (default: row-major, `(0, 1, ...)`); indexing is the same whatever the order."""
        _check_order(shape, order)
        return self._place(ti.field(dtype, needs_grad=needs_grad), shape, needs_grad, order)

    def vector(self, n: int, dtype: Any, shape: tuple[int, ...], needs_grad: bool = False,
               order: tuple[int, ...] | None = None) -> Any:
        """A field of n-vectors; `needs_grad` and `order` as `field`."""
        _check_order(shape, order)
        return self._place(ti.Vector.field(n, dtype, needs_grad=needs_grad), shape, needs_grad, order)

    def finalize(self) -> "FieldGroup":
        if self.nbytes > VULKAN_MAX_BYTES and taichi_private.arch() == ti.vulkan:
            raise UserError(f"a field group of {self.nbytes / 2 ** 20:.1f} MiB is more than one Vulkan storage buffer "
                            f"is guaranteed to hold ({VULKAN_MAX_BYTES // 2 ** 20} MiB): split it, or use a smaller "
                            f"size")
        self._tree = self._builder.finalize()
        return self

    def destroy(self) -> None:
        """Free the group's fields. Taichi 1.7.4 then drops every kernel it has compiled in the
        process, since it cannot tell which read these fields; the next call of each would run
        Taichi's Python front end again (0.1-0.2 s for a large kernel, seconds for the ray march).
        The instances that were not given one of this group's fields are put back: a kernel
        reaches fields only through its template arguments here (no kernel reads a global field),
        and those are in the instance's key (`tests/test_taichi_contract.py` pins both)."""
        if self._tree is not None:
            freed = {id(field) for field in self._fields}
            kept = []
            for kernel in taichi_private.kernels():
                instances = _instances_without(kernel, freed)
                kept.append((kernel, {key: compiled for key, compiled in kernel.compiled_kernels.items()
                                      if key[1] in instances}))
            self._tree.destroy()
            for kernel, instances in kept:
                kernel.compiled_kernels.update(instances)
            self._tree = None


def _check_order(shape: tuple[int, ...], order: tuple[int, ...] | None) -> None:
    """Refuse an `order` that is not a permutation of shape's axes, before a field is made (Taichi refuses every
    later kernel while a field it made is left unplaced)."""
    if order is not None and sorted(order) != list(range(len(shape))):
        raise ValueError(f"order {order} must list the axes of shape {shape}, each once")


def _instances_without(kernel: Any, freed: set[int]) -> set[int]:
    """The ids of `kernel`'s instances whose template key holds none of the `freed` fields."""
    return {instance for key, instance in kernel.mapper.mapping.items() if not _holds(key, freed)}


def _holds(value: Any, freed: set[int]) -> bool:
    """Whether an instance's template key holds one of the `freed` fields, or anything that may: a
    data-oriented object or a list (kept as a weak reference) or an SNode. Taichi keys a field by the
    object, an ndarray by its element type and rank, a scalar by its value, a Taichi expression by its
    address (this project passes none to a template argument)."""
    if isinstance(value, tuple):
        return any(_holds(item, freed) for item in value)
    return id(value) in freed or isinstance(value, (taichi_private.CoreSNode, weakref.ref))
