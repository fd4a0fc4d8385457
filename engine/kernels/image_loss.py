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
def image_loss_terms(image: ti.template(), target: ti.template(), weight: ti.template(), first: ti.i32, n: ti.i32,
                     kind: ti.i32, terms: ti.template(), dloss: ti.template()):
    """terms[i] = loss term of pixel i (L2 or L1, see the module docstring); dloss[i] = d terms[i] / d image[i];
    for i < n, against target[first + i] and weight[first + i] (`first`: a band's first pixel in the view)."""
    for i in range(n):
        d = image[i] - target[first + i]
        w = weight[first + i]
        if kind == L2:
            terms[i] = 0.5 * w * d.dot(d)
            dloss[i] = w * d
        else:
            terms[i] = w * ti.abs(d).sum()
            dloss[i] = w * ti.math.sign(d)


@custom_adjoint(image_loss_terms)
@ti.kernel
def image_loss_terms_adjoint(image: ti.template(), target: ti.template(), weight: ti.template(), first: ti.i32,
                             n: ti.i32, kind: ti.i32, terms: ti.template(), dloss: ti.template()):
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
