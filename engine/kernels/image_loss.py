"""Image losses on the device: per-pixel terms and their gradient in one pass, and a 2x2 pyramid.

`image_loss_terms` writes, for each pixel i < n of two vec3 images (row-major, flat), the
term (L2: 0.5 w |d|^2, L1: w |d|_1, with d = image - target and w the pixel's weight:
1, or 0 outside a region of interest) and, in the same pass, the term's derivative with
respect to the image (L2: w d; L1: w sign(d)); its declared adjoint
only multiplies that stored derivative by the term's incoming gradient. The terms are
then summed in a fixed order (`engine.kernels.reduce.sum_into`, whose weight carries
the 1 / (3 * pixels) of a mean), so losses and gradients are bit-identical run to run.

`downsample` halves an image by 2x2 box means (straight-line code: Taichi differentiates
it); a loss on each level of such a pyramid sees displacements of several pixels.
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint

L2, L1 = 0, 1
LOSS_KINDS = {"l2": L2, "l1": L1}


@ti.kernel
def image_loss_terms(image: ti.template(), target: ti.template(), weight: ti.template(), n: ti.i32, kind: ti.i32,
                     terms: ti.template(), dloss: ti.template()):
    """terms[i] = loss term of pixel i (L2 or L1, see the module docstring); dloss[i] = d terms[i] / d image[i]."""
    for i in range(n):
        d = image[i] - target[i]
        w = weight[i]
        if kind == L2:
            terms[i] = 0.5 * w * d.dot(d)
            dloss[i] = w * d
        else:
            terms[i] = w * ti.abs(d).sum()
            dloss[i] = w * ti.math.sign(d)


@custom_adjoint(image_loss_terms)
@ti.kernel
def image_loss_terms_adjoint(image: ti.template(), target: ti.template(), weight: ti.template(), n: ti.i32,
                             kind: ti.i32, terms: ti.template(), dloss: ti.template()):
    """image.grad[i] += terms.grad[i] * dloss[i]: the derivative the forward pass stored."""
    for i in range(n):
        image.grad[i] += terms.grad[i] * dloss[i]


@ti.kernel
def downsample(src: ti.template(), width: ti.i32, height: ti.i32, dst: ti.template()):
    """dst = src (width x height, row-major; vector or scalar) averaged over 2x2 blocks: (width // 2) x (height // 2)."""
    for i in range((width // 2) * (height // 2)):
        row = i // (width // 2)
        col = i - row * (width // 2)
        a = 2 * row * width + 2 * col
        dst[i] = 0.25 * (src[a] + src[a + 1] + src[a + width] + src[a + width + 1])


@ti.func
def _tent_at(f: ti.template(), i: ti.i32, width: ti.i32, height: ti.i32):
    """The 3x3 tent ([1 2 1] x [1 2 1] / 16) of f around pixel i (row-major, width x height), zero outside the
    image: a symmetric operator, so the same stencil is its own adjoint."""
    row = i // width
    col = i - row * width
    acc = f[i] * 0.0
    for dy, dx in ti.static(ti.ndrange((-1, 2), (-1, 2))):
        r, c = row + dy, col + dx
        if 0 <= r < height and 0 <= c < width:
            acc += f[r * width + c] * ((2 - abs(dy)) * (2 - abs(dx)) / 16.0)
    return acc


@ti.kernel
def blur(src: ti.template(), width: ti.i32, height: ti.i32, dst: ti.template()):
    """dst = src (width x height, row-major, vec3) under the 3x3 tent, zero-padded. A residual at one pixel then
    also reaches its neighbours: the forward-image comparison (engine.diff_render) needs that, since the
    differentiable render's soft edge lies outside a silhouette only."""
    for i in range(width * height):
        dst[i] = _tent_at(src, i, width, height)


@custom_adjoint(blur)
@ti.kernel
def blur_adjoint(src: ti.template(), width: ti.i32, height: ti.i32, dst: ti.template()):
    """src.grad += tent(dst.grad): the stencil is symmetric; a gather, so no float atomics (bit-reproducible)."""
    for i in range(width * height):
        src.grad[i] += _tent_at(dst.grad, i, width, height)
