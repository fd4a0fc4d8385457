"""The forward renderer's image under the differentiable render's gradient: one kernel and its adjoint.

A PNG of the scene comes from the forward renderer (`raymarch.render`: point-sampled
hit-to-hit silhouettes, the running-minimum soft shadow), whose image differs from the
differentiable render's primal (`raymarch_grad`: relaxed edges, the refined closest
approach) by ~1e-3 of loss at the true pose: a floor under any fit of such a picture.
`substitute_image` puts the forward renderer's image of the same theta where the loss
reads its image, so the loss and its residual are the forward renderer's and vanish at
the true pose; its declared adjoint passes the loss's image gradient unchanged to the
differentiable render's image (d image / d diff_image := identity, a straight-through
estimator), so the gradient is the differentiable render's Jacobian applied to the
forward renderer's residual. engine/diff_render.py (`set_compare("forward")`) records it.
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint


@ti.kernel
def substitute_image(diff_image: ti.template(), forward_rgb: ti.types.ndarray(dtype=ti.f32, ndim=3), first: ti.i32,
                     n: ti.i32, image: ti.template()):
    """image[i] = forward_rgb at pixel first + i (row-major, i < n; forward_rgb (height, width, 3); `first`: a
    band's first pixel in the view); diff_image is not read: it is where the adjoint sends the gradient."""
    for i in range(n):
        width = forward_rgb.shape[1]
        row = (first + i) // width
        col = first + i - row * width
        image[i] = ti.Vector([forward_rgb[row, col, 0], forward_rgb[row, col, 1], forward_rgb[row, col, 2]])


@custom_adjoint(substitute_image)
@ti.kernel
def substitute_image_adjoint(diff_image: ti.template(), forward_rgb: ti.types.ndarray(dtype=ti.f32, ndim=3),
                             first: ti.i32, n: ti.i32, image: ti.template()):
    """diff_image.grad[i] += image.grad[i]: the straight-through pass (see the module docstring)."""
    for i in range(n):
        diff_image.grad[i] += image.grad[i]
