"""Lane values: what lets the scene's math run one ray per thread or a packet of rays per thread, from one source.

A *lane value* is a plain f32 or i32 (one ray: the gpu backends, a thread per ray) or a
`ti.types.vector(W, ...)` (a packet of W rays in one cpu thread: LLVM turns each arithmetic operation on it
into W-wide SIMD instructions). The functions of `engine.kernels.raymarch` take points as three lane values
and branch only through `any_lane` (skip work that no lane needs) and `ti.select` (choose per lane), so the
same text compiles at any W, and at W = 1 it is the scalar code, operation for operation.

Example (any kernel):
    >>> import taichi as ti
    >>> from engine import backend
    >>> _ = backend.init("cpu")
    >>> @ti.func
    ... def clamp_low(x):  # a lane function: x is one value or a packet
    ...     out = like(x, 0.0)
    ...     if any_lane(x > 0.0):
    ...         out = ti.select(x > 0.0, x, out)
    ...     return out
    >>> @ti.kernel
    ... def demo() -> ti.f32:
    ...     packet = clamp_low(ti.Vector([-1.0, 2.0, 3.0, -4.0]))
    ...     return packet.sum() + clamp_low(5.0)
    >>> demo()
    10.0
"""
import taichi as ti

from engine.taichi_private import is_tensor_expr

# Packet width of the cpu renderer (`lanes_for`). Measured on this machine's AVX-512 cores (march of a
# 1024x512 frame, docs/RESULTS.md): W = 8 runs 6x faster than W = 1; W = 16 no faster than 8 and its kernels
# compile 3x longer.
CPU_LANES = 8


def lanes_for(arch: str) -> int:
    """The packet width a renderer launches on `arch` ("cpu", "cuda", "vulkan"): SIMD packets on the cpu;
    on a gpu one ray per thread, which is what its warps vectorise already."""
    return CPU_LANES if arch == "cpu" else 1


def is_packet(x) -> bool:
    """(Compile time) whether the Taichi value x is a packet (a vector of lanes) rather than one value."""
    return is_tensor_expr(x)


@ti.func
def any_lane(c):
    """Whether condition c holds in any lane (c itself for one value)."""
    if ti.static(is_packet(c)):
        return (c != 0).any()
    else:
        return c != 0


@ti.func
def all_lanes(c):
    """Whether condition c holds in every lane (c itself for one value)."""
    if ti.static(is_packet(c)):
        return (c != 0).all()
    else:
        return c != 0


@ti.func
def like(x, value):
    """`value` in every lane of x's shape: a packet if x is one, else one value (so a variable that starts as
    a constant can be assigned lane values later: Taichi fixes a variable's type at its first assignment)."""
    return ti.select(x == x, value, value)


@ti.func
def lane(x, j: ti.template()):
    """Lane j of x (x itself for one value)."""
    if ti.static(is_packet(x)):
        return x[j]
    else:
        return x


@ti.func
def with_lane(x, j: ti.template(), value):
    """x with lane j set to value (value itself for one value): how a kernel gathers a packet from a field."""
    if ti.static(is_packet(x)):
        out = x
        out[j] = value
        return out
    else:
        return value


@ti.func
def packet_indices(packet: ti.i32, count: ti.i32, lanes: ti.template()):
    """The indices of packet `packet` of `lanes` consecutive items of `count` (a lane value): pixels of a row,
    slots. A last packet that overhangs repeats the last item (computed, never written: the caller checks
    `packet * lanes + j < count`)."""
    if ti.static(lanes > 1):
        return ti.min(ti.Vector([packet * lanes + j for j in ti.static(range(lanes))]), count - 1)
    else:
        return ti.min(packet, count - 1)
