"""Native launches: call a compiled kernel through Taichi's runtime, without the plain call's Python work.

`bind` resolves the compiled kernel and fills a launch context once; `bound.set` rewrites
one argument; `native(kernel)` is a drop-in for `kernel(...)`; `LaunchSequence` replays
prepared launches back to back. The results equal the plain call's, bit for bit (checked
here); the time per launch is printed for both (engine.launch.launch does this for you).

    python examples/native_launch.py                    # then a window plots the time of each launch
    python examples/native_launch.py --arch vulkan --headless
"""
import time

import numpy as np
import taichi as ti

from app.flags import example_parser
from engine import backend
from engine.dispatch import LaunchSequence, bind, native
from engine.fields import FieldGroup


@ti.kernel
def update(x: ti.template(), v: ti.template(), dt: ti.f32):
    for i in x:
        x[i] += v[i] * dt


def timed(call, launches: int = 300) -> np.ndarray:
    seconds = []
    for _ in range(launches):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    ti.sync()
    return np.array(seconds) * 1e6


if __name__ == "__main__":
    args = example_parser(__doc__).parse_args()         # --arch, --headless
    print(f"backend: {backend.init(args.arch).name}")
    group = FieldGroup()
    x, v, y = group.field(ti.f32, (256,)), group.field(ti.f32, (256,)), group.field(ti.f32, (256,))
    group.finalize()
    v.fill(1.0)

    step = bind(update, x, v, 0.01)        # fields, scalars, vectors, ndarrays; bind(update.grad, ...) too
    for t in range(1000):
        step.set("dt", 0.01 * (1 + t % 2))  # cheap update of one argument slot
        step()
    fast = native(update)                   # drop-in for update(...)
    fast(x, v, 0.02)
    LaunchSequence([bind(update, x, v, 0.25), bind(update, x, v, 0.5)])()   # prepared launches back to back
    for t in range(1000):                   # the same with plain calls, into y
        update(y, v, 0.01 * (1 + t % 2))
    for dt in (0.02, 0.25, 0.5):
        update(y, v, dt)
    same = np.array_equal(x.to_numpy(), y.to_numpy())
    print(f"native x[0] = {x[0]:.4f}, plain y[0] = {y[0]:.4f}: {'bit-identical' if same else 'DIFFERENT'}")

    plain, fast_us = timed(lambda: update(x, v, 0.01)), timed(lambda: fast(x, v, 0.01))
    # on the CPU a launch returns when the kernel is done: both times include its run
    print(f"per launch: plain call {np.median(plain):.1f} us, native {np.median(fast_us):.2f} us (medians)")
    if not args.headless:
        from app.ui.viewer import show_curves

        show_curves("native_launch: us per launch", np.arange(len(plain)), {"plain call": plain, "native": fast_us},
                    log_y=True)
    if not same:
        raise SystemExit("native_launch: native and plain launches disagree")
