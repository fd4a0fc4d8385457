"""Device optimisers: SGD (optional momentum) and Adam (bias-corrected), stepping fields in place.

    opt = Adam([vertices], lr=1e-2)
    for it in range(n):
        with tape: ...                  # forward, recorded
        tape.backward(loss)             # fills vertices.grad on the device
        opt.step()                      # one kernel per parameter; no host round trip
        tape.reset()                    # zero the gradients for the next iteration

Each step is one kernel launch per parameter field (engine.autodiff.optim_kernels);
the only host work is the step counter and Adam's two bias-correction scalars,
passed as kernel arguments. Optimiser state (velocity, moments) lives in the
optimiser's own FieldGroup, freed by `destroy()`.
"""
from __future__ import annotations

from typing import Any, Sequence

from engine.autodiff.optim_kernels import adam_step, sgd_momentum_step, sgd_step
from engine.autodiff.tape import grad_of
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.launch import launch
from engine.taichi_private import Field, MatrixField


def _check_params(params: Sequence[Any]) -> list[Field]:
    params = list(params)
    if not params:
        raise ValueError("optimiser: no parameters given")
    for i, param in enumerate(params):
        if not isinstance(param, Field) or grad_of(param) is None:
            raise ValueError(f"optimiser: parameter {i} must be a Taichi field allocated with needs_grad=True")
    return params


def _check_hyper(name: str, value: float, low: float, high: float | None = None, low_open: bool = True) -> float:
    value = float(value)
    above = value > low if low_open else value >= low
    if not (above and (high is None or value < high)):
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and < {high:g}" if high is not None else "")
        raise UserError(f"optimiser {name} must be {bound}, got {value:g}")
    return value


class _StateFields:
    """Zero-initialised fields shaped like each parameter, in one FieldGroup."""

    def __init__(self, params: Sequence[Field], count: int):
        self.group = FieldGroup()
        self.fields = [[self._like(param) for param in params] for _ in range(count)]
        self.group.finalize()

    def _like(self, param: Field) -> Field:
        if isinstance(param, MatrixField):
            if param.m != 1:
                raise ValueError("optimiser: matrix fields are not supported; use vector or scalar fields")
            return self.group.vector(param.n, param.dtype, param.shape)
        return self.group.field(param.dtype, param.shape)


class SGD:
    """p <- p - lr * g, or with momentum mu: v <- mu v + g; p <- p - lr v (PyTorch's form)."""

    def __init__(self, params: Sequence[Field], lr: float, momentum: float = 0.0):
        self.params = _check_params(params)
        self.lr = _check_hyper("lr", lr, 0.0)
        self.momentum = _check_hyper("momentum", momentum, 0.0, 1.0, low_open=False)
        self._state = _StateFields(self.params, 1) if self.momentum > 0.0 else None

    def step(self) -> None:
        for i, param in enumerate(self.params):
            if self._state is None:
                launch(sgd_step, param, param.grad, self.lr)
            else:
                launch(sgd_momentum_step, param, param.grad, self._state.fields[0][i], self.lr, self.momentum)

    def destroy(self) -> None:
        if self._state is not None:
            self._state.group.destroy()


class Adam:
    """Adam (Kingma & Ba) with bias correction: the update PyTorch's `torch.optim.Adam` makes."""

    def __init__(self, params: Sequence[Field], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params = _check_params(params)
        self.lr = _check_hyper("lr", lr, 0.0)
        self.beta1 = _check_hyper("beta1", betas[0], 0.0, 1.0, low_open=False)
        self.beta2 = _check_hyper("beta2", betas[1], 0.0, 1.0, low_open=False)
        self.eps = _check_hyper("eps", eps, 0.0)
        self.t = 0  # steps taken
        self._state = _StateFields(self.params, 2)

    def step(self) -> None:
        self.t += 1
        correction1 = 1.0 / (1.0 - self.beta1 ** self.t)
        correction2 = 1.0 / (1.0 - self.beta2 ** self.t)
        moments1, moments2 = self._state.fields
        for param, m, v in zip(self.params, moments1, moments2):
            launch(adam_step, param, param.grad, m, v, self.lr, self.beta1, self.beta2, self.eps,
                   correction1, correction2)

    def destroy(self) -> None:
        self._state.group.destroy()
