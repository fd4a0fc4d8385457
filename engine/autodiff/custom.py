"""Hand-written adjoints, each declared beside its forward: `@custom_adjoint(forward)`.

Taichi differentiates straight-line kernels itself (`kernel.grad`). Some kernels need an
adjoint written by hand: a fixed-order reduction (Taichi's own adjoint of a gather or a
broadcast is a float `atomic_add`, whose order, and so whose last bits, change run to
run), or a forward that already computed its local derivative in the same pass (the
soft minimum, the image loss). The pairing is declared where the forward is defined,
the adjoint named after its forward and written right after it, as micrograd's
`_backward` and Taichi's `@ti.ad.grad_for` do:

    @ti.kernel
    def broadcast_rows(src: ti.template(), n: ti.template(), dst: ti.template(), partial: ti.template()):
        ...

    @custom_adjoint(broadcast_rows)
    @ti.kernel
    def broadcast_rows_adjoint(src: ti.template(), n: ti.template(), dst: ti.template(), partial: ti.template()):
        ...                              # src.grad += fixed-order sum of dst.grad rows

The adjoint takes exactly the forward's parameters (checked when declared). Inside a
recording tape, `engine.launch.launch(broadcast_rows, ...)` records the launch and the
tape's reverse pass runs `broadcast_rows_adjoint` with the same arguments in place of
Taichi's `broadcast_rows.grad`. Outside a tape the forward just runs. Every pair is
listed in docs/ARCHITECTURE.md with the test that gradchecks it.

This module imports nothing of the project, so kernel modules (engine/kernels) may use
the decorator.
"""
from __future__ import annotations

import inspect
from typing import Callable

_adjoints: dict[Callable, Callable] = {}  # forward's Python function -> its adjoint (a kernel or a function)


def _python_function(kernel: Callable) -> Callable:
    primal = getattr(kernel, "_primal", kernel)
    return getattr(primal, "func", primal)


def _params(kernel: Callable) -> tuple[str, ...]:
    return tuple(inspect.signature(_python_function(kernel)).parameters)


def custom_adjoint(forward: Callable) -> Callable[[Callable], Callable]:
    """Declare the decorated kernel (or Python function) as the adjoint of `forward`.

    The adjoint must take the forward's parameters, in the same order and with the same
    names; it adds the forward's input gradients from its output gradients (`p.grad`).
    """
    def register(adjoint: Callable) -> Callable:
        key = _python_function(forward)
        if key in _adjoints:
            raise ValueError(f"{key.__name__} already has a custom adjoint ({_python_function(_adjoints[key]).__name__})")
        if _params(adjoint) != _params(forward):
            raise TypeError(f"custom adjoint {_python_function(adjoint).__name__}{_params(adjoint)} must take the "
                            f"parameters of its forward {key.__name__}{_params(forward)}")
        _adjoints[key] = adjoint
        return adjoint
    return register


def adjoint_of(kernel: Callable) -> Callable | None:
    """The adjoint declared for `kernel` with `custom_adjoint`, or None (Taichi's `kernel.grad` applies)."""
    return _adjoints.get(_python_function(kernel))


def custom_adjoints() -> dict[str, str]:
    """Every declared pair, as {forward name: adjoint name} (docs and tests list them)."""
    return {forward.__name__: _python_function(adjoint).__name__ for forward, adjoint in _adjoints.items()}
