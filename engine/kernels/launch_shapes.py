"""No-op kernels with the argument shapes of Warp's `benchmark_launches.py` (launch-overhead probes).

Like Warp's, each body is a one-iteration loop that does nothing, so a launch measures
the cost of getting arguments to the device and the kernel started, not of any work.
`k0` no arguments, `kf` three floats, `kv` three vec3, `km` three mat33, `ka` three
1-D float arrays (Taichi ndarrays: runtime arguments, like wp.array), `kz` all nine.
"""
import taichi as ti

FloatArray = ti.types.ndarray(dtype=ti.f32, ndim=1)


@ti.kernel
def k0():
    for _ in range(1):
        pass


@ti.kernel
def kf(x: ti.f32, y: ti.f32, z: ti.f32):
    for _ in range(1):
        pass


@ti.kernel
def kv(u: ti.math.vec3, v: ti.math.vec3, w: ti.math.vec3):
    for _ in range(1):
        pass


@ti.kernel
def km(M: ti.math.mat3, N: ti.math.mat3, O: ti.math.mat3):  # noqa: N803 (Warp's names)
    for _ in range(1):
        pass


@ti.kernel
def ka(a: FloatArray, b: FloatArray, c: FloatArray):
    for _ in range(1):
        pass


@ti.kernel
def kz(a: FloatArray, b: FloatArray, c: FloatArray, x: ti.f32, y: ti.f32, z: ti.f32,
       u: ti.math.vec3, v: ti.math.vec3, w: ti.math.vec3):
    for _ in range(1):
        pass


@ti.kernel
def echo(out: FloatArray, a: FloatArray, x: ti.f32, u: ti.math.vec3, M: ti.math.mat3):  # noqa: N803
    """Writes its arguments back, so a benchmark can check they arrive before timing launches."""
    for _ in range(1):
        out[0] = a[0]
        out[1] = x
        for i in ti.static(range(3)):
            out[2 + i] = u[i]
            for j in ti.static(range(3)):
                out[5 + 3 * i + j] = M[i, j]
