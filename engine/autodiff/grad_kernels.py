"""Gradient bookkeeping on the device: seeding d loss = 1 and zeroing gradients (and any other field).

One small kernel instead of Taichi's `field.fill`, because it goes through the native
launch path (engine.launch.dispatch): measured here at ~15 us against ~38 us for
`fill` on a 642 x 3 gradient; and the tape zeroes every touched gradient every iteration
with one launch of `fill_values` for all of them (a launch is a GPU's unit of host cost).
Chamfer (engine/chamfer_loss.py) zeroes its loss and its integer counters with it too.
"""
import taichi as ti

from engine.taichi_private import memory_order


@ti.kernel
def fill_value(buffer: ti.template(), value: ti.f64):
    for I in ti.grouped(buffer):
        buffer[I] = ti.cast(value, buffer.dtype)  # broadcast to every component of a vector field


@ti.kernel
def fill_values(buffers: ti.template(), value: ti.f64):
    """Every element of each field of `buffers` (a tuple of fields, fixed per compiled instance) set to `value`:
    the tape zeroes all the gradients of an iteration in one launch (a loop per field, one after another)."""
    for k in ti.static(range(len(buffers))):
        for I in ti.grouped(buffers[k]):
            buffers[k][I] = ti.cast(value, buffers[k].dtype)


@ti.kernel
def fill_rows(buffer: ti.template(), rows: ti.i32, value: ti.f64):
    """The first `rows` rows (first axis) of `buffer` set to `value`: a field allocated at a maximum size and
    used at a smaller one is zeroed where it was used (engine.autodiff.tape.Tape.used_rows)."""
    _fill_first(buffer, rows, value)


@ti.kernel
def fill_counted_rows(buffer: ti.template(), count: ti.template(), value: ti.f64):
    """`fill_rows` with the row count on the device: the first count[None] rows (at most all of them), where
    count (a 0-d int field) was written by an earlier kernel (engine.diff_render's slot count): the host sizes the
    launch without waiting to read it."""
    _fill_first(buffer, ti.min(count[None], buffer.shape[0]), value)


@ti.func
def _fill_first(buffer: ti.template(), rows: ti.i32, value: ti.f64):
    if ti.static(memory_order(buffer)[0] == 0):
        for I in ti.grouped(ti.ndrange(rows, *buffer.shape[1:])):
            buffer[I] = ti.cast(value, buffer.dtype)
    else:  # a sample-major (slots, samples) field: a loop over the rows per sample, so the writes run in memory order
        ti.static_assert(len(buffer.shape) == 2, "a counted fill of a reordered field takes (rows, columns) only")
        for j in ti.static(range(buffer.shape[1])):
            for row in range(rows):
                buffer[row, j] = ti.cast(value, buffer.dtype)
