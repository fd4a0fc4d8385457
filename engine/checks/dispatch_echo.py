"""Does native dispatch deliver a kernel's arguments exactly as Taichi's plain call? The echo check.

`echo` (engine/kernels/launch_shapes.py) writes its arguments back: an array element, a
float, a vec3 and a mat3. `run_dispatch_echo()` launches it three ways, as a plain call,
through `native` and through a `bind`ing, and returns the three outputs beside the values
sent; `echo_mismatches` says in words what differs. The `launch_overhead` claim checks it
(a parity computation, so it runs on either backend), and `bench launch` refuses to time
launches that do not deliver their arguments.

    >>> from engine import backend
    >>> _ = backend.init("cpu")
    >>> echo_mismatches(run_dispatch_echo())
    []
"""
from __future__ import annotations

import numpy as np

# what `echo` is sent, in the order it writes it back: a[0], x, u (3), M row by row (9)
ECHO_SENT = np.array([3.5, 17.0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9.5], np.float32)
WAYS = ("plain", "native", "bound")


def run_dispatch_echo() -> dict[str, np.ndarray]:
    """The parity computation "dispatch_echo": `echo`'s output (14,) float32 per way of launching, and `sent`."""
    import taichi as ti

    from engine.dispatch import bind, native
    from engine.kernels.launch_shapes import echo

    a = ti.ndarray(ti.f32, 1)
    a.from_numpy(ECHO_SENT[:1])
    args = (a, float(ECHO_SENT[1]), ti.math.vec3(*ECHO_SENT[2:5]), ti.math.mat3(ECHO_SENT[5:].reshape(3, 3)))
    launches = {"plain": lambda out: echo(out, *args), "native": lambda out: native(echo)(out, *args),
                "bound": lambda out: bind(echo, out, *args)()}
    outputs = {}
    for way in WAYS:
        out = ti.ndarray(ti.f32, ECHO_SENT.size)
        launches[way](out)
        outputs[way] = out.to_numpy()
    return {**outputs, "sent": ECHO_SENT.copy()}


def echo_mismatches(outputs: dict[str, np.ndarray]) -> list[str]:
    """One line per way of launching whose output differs from what was sent (empty: all delivered)."""
    sent = outputs["sent"]
    return [f"{way}: slots {np.flatnonzero(outputs[way] != sent).tolist()} came back as "
            f"{outputs[way][outputs[way] != sent].tolist()}" for way in WAYS if not np.array_equal(outputs[way], sent)]
