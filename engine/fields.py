"""Field groups: Taichi fields allocated together and freed together.

Why fields and not ndarrays: Taichi 1.7.4's reverse-mode autodiff on ndarrays is
silently wrong on Vulkan (gradients stay zero; taichi issue #8524, checked in
tests/test_taichi_contract.py), while fields differentiate correctly on every
backend. To keep several independent problems in one process (the GUI runs a fit
beside a ray march) every problem owns a `FieldGroup`: one SNode tree, destroyed
as a whole. Kernels take fields as `ti.template()` arguments, so one kernel source
serves every group (Taichi instantiates it once per distinct field set).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import taichi as ti

from engine import backend

_TAICHI_DTYPES = {np.dtype(np.float32): ti.f32, np.dtype(np.float64): ti.f64}


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

    def _place(self, field: Any, shape: tuple[int, ...], needs_grad: bool) -> Any:
        if self._tree is not None:
            raise RuntimeError("FieldGroup is finalized: declare every field before finalize()")
        if any(n <= 0 for n in shape):
            raise ValueError(f"field shape {shape} must be positive")
        parent = self._builder.dense(ti.axes(*range(len(shape))), shape) if shape else self._builder
        parent.place(field, field.grad) if needs_grad else parent.place(field)
        return field

    def field(self, dtype: Any, shape: tuple[int, ...] = (), needs_grad: bool = False) -> Any:
        return self._place(ti.field(dtype, needs_grad=needs_grad), shape, needs_grad)

    def vector(self, n: int, dtype: Any, shape: tuple[int, ...], needs_grad: bool = False) -> Any:
        return self._place(ti.Vector.field(n, dtype, needs_grad=needs_grad), shape, needs_grad)

    def finalize(self) -> "FieldGroup":
        self._tree = self._builder.finalize()
        return self

    def destroy(self) -> None:
        if self._tree is not None:
            self._tree.destroy()
            self._tree = None
