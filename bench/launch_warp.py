"""Warp's side of the launch benchmark: the kernels and structs of Warp's own
`warp/examples/benchmarks/benchmark_launches.py` (imported only when warp-lang is installed).

Direct form: `wp.launch(kN, dim=1, inputs=[...])` with separate arguments; struct form:
`wp.launch(ksN, dim=1, inputs=[struct])` with the arguments packed in a `wp.struct` once.
"""
import time

import warp as wp

wp.config.log_level = wp.LOG_WARNING  # no start-up banner or module-load lines in our tables


@wp.struct
class S0:
    pass


@wp.struct
class Sf:
    x: float
    y: float
    z: float


@wp.struct
class Sv:
    u: wp.vec3
    v: wp.vec3
    w: wp.vec3


@wp.struct
class Sm:
    M: wp.mat33
    N: wp.mat33
    O: wp.mat33


@wp.struct
class Sa:
    a: wp.array(dtype=float)
    b: wp.array(dtype=float)
    c: wp.array(dtype=float)


@wp.struct
class Sz:
    a: wp.array(dtype=float)
    b: wp.array(dtype=float)
    c: wp.array(dtype=float)
    x: float
    y: float
    z: float
    u: wp.vec3
    v: wp.vec3
    w: wp.vec3


@wp.kernel
def k0():
    tid = wp.tid()  # noqa: F841


@wp.kernel
def kf(x: float, y: float, z: float):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def kv(u: wp.vec3, v: wp.vec3, w: wp.vec3):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def km(M: wp.mat33, N: wp.mat33, O: wp.mat33):  # noqa: N803
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ka(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def kz(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float),
       x: float, y: float, z: float, u: wp.vec3, v: wp.vec3, w: wp.vec3):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ks0(s: S0):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ksf(s: Sf):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ksv(s: Sv):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ksm(s: Sm):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ksa(s: Sa):
    tid = wp.tid()  # noqa: F841


@wp.kernel
def ksz(s: Sz):
    tid = wp.tid()  # noqa: F841


def _struct(cls, **members):
    value = cls()
    for name, member in members.items():
        setattr(value, name, member)
    return value


def cells(device: str) -> dict[tuple[str, str], tuple]:
    """(shape, form) -> (kernel, inputs) for wp.launch on `device`, with Warp's argument values."""
    wp.init()
    with wp.ScopedDevice(device):
        a, b, c = (wp.zeros(1, dtype=float) for _ in range(3))
        x, y, z = 17.0, 42.0, 99.0
        u, v, w = wp.vec3(1, 2, 3), wp.vec3(10, 20, 30), wp.vec3(100, 200, 300)
        M, N, O = wp.mat33(), wp.mat33(), wp.mat33()  # noqa: N806
        arrays, floats, vecs, mats = dict(a=a, b=b, c=c), dict(x=x, y=y, z=z), dict(u=u, v=v, w=w), dict(M=M, N=N, O=O)
        direct = {"k0": (k0, []), "kf": (kf, [x, y, z]), "kv": (kv, [u, v, w]), "km": (km, [M, N, O]),
                  "ka": (ka, [a, b, c]), "kz": (kz, [a, b, c, x, y, z, u, v, w])}
        struct = {"k0": (ks0, [S0()]), "kf": (ksf, [_struct(Sf, **floats)]), "kv": (ksv, [_struct(Sv, **vecs)]),
                  "km": (ksm, [_struct(Sm, **mats)]), "ka": (ksa, [_struct(Sa, **arrays)]),
                  "kz": (ksz, [_struct(Sz, **arrays, **floats, **vecs)])}
    out = {(shape, "direct"): entry for shape, entry in direct.items()}
    out.update({(shape, "struct"): entry for shape, entry in struct.items()})
    return out


def timed(kernel, inputs: list, device: str, launches: int) -> float:
    """Seconds for `launches` launches, synchronised outside the enqueue loop (as Warp's benchmark)."""
    with wp.ScopedDevice(device):
        wp.synchronize_device()
        start = time.perf_counter()
        for _ in range(launches):
            wp.launch(kernel, dim=1, inputs=inputs)
        elapsed = time.perf_counter() - start
        wp.synchronize_device()
    return elapsed


def recorded(kernel, inputs: list, device: str):
    """Warp's own prepared launch (`wp.launch(..., record_cmd=True)`), the analogue of our `bind`."""
    with wp.ScopedDevice(device):
        return wp.launch(kernel, dim=1, inputs=inputs, record_cmd=True)


def timed_recorded(command, device: str, launches: int) -> float:
    """Seconds for `launches` calls of `command.launch()`, synchronised outside the loop."""
    with wp.ScopedDevice(device):
        wp.synchronize_device()
        start = time.perf_counter()
        for _ in range(launches):
            command.launch()
        elapsed = time.perf_counter() - start
        wp.synchronize_device()
    return elapsed
