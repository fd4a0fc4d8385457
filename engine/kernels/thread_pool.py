"""The kernel `engine.cpu_pool` launches to see which threads are Taichi's CPU pool workers."""
import taichi as ti


@ti.kernel
def wake_workers(out: ti.types.ndarray(dtype=ti.i32, ndim=1)):
    """A parallel loop of almost no work: every pool worker wakes for it (each looks for a block)."""
    for i in range(out.shape[0]):
        out[i] = i
