"""Optimiser updates as device kernels: each steps one parameter field in place.

Scalars (learning rate, momentum, Adam's betas and bias corrections) arrive as f64 and
are cast to the parameter's precision, so an f32 parameter is updated in f32 (as
PyTorch and Warp do) and an f64 one keeps every digit (the numpy oracles in
tests/test_optim.py compare f64 runs to ~1e-15). Works for scalar and vector fields.
"""
import taichi as ti


@ti.kernel
def sgd_step(param: ti.template(), grad: ti.template(), lr: ti.f64):
    for I in ti.grouped(param):
        param[I] -= ti.cast(lr, param.dtype) * grad[I]


@ti.kernel
def sgd_momentum_step(param: ti.template(), grad: ti.template(), velocity: ti.template(), lr: ti.f64,
                      momentum: ti.f64):
    # PyTorch's form (no dampening): v <- momentum * v + g;  p <- p - lr * v
    for I in ti.grouped(param):
        v = ti.cast(momentum, param.dtype) * velocity[I] + grad[I]
        velocity[I] = v
        param[I] -= ti.cast(lr, param.dtype) * v


@ti.kernel
def adam_step(param: ti.template(), grad: ti.template(), m: ti.template(), v: ti.template(), lr: ti.f64,
              beta1: ti.f64, beta2: ti.f64, eps: ti.f64, correction1: ti.f64, correction2: ti.f64):
    # m, v: first and second moment estimates; correction_k = 1 / (1 - beta_k^t) for step t >= 1.
    for I in ti.grouped(param):
        g = grad[I]
        b1, b2 = ti.cast(beta1, param.dtype), ti.cast(beta2, param.dtype)
        m_new = b1 * m[I] + (1 - b1) * g
        v_new = b2 * v[I] + (1 - b2) * g * g
        m[I] = m_new
        v[I] = v_new
        m_hat = m_new * ti.cast(correction1, param.dtype)
        v_hat = v_new * ti.cast(correction2, param.dtype)
        param[I] -= ti.cast(lr, param.dtype) * m_hat / (ti.sqrt(v_hat) + ti.cast(eps, param.dtype))
