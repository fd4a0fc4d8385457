"""Fixed-order reductions with their adjoints: sums that give the same bits every run.

Float atomics into one address add in thread-schedule order, so their last bits change
from run to run (and many threads adding into a few addresses also serialise on them).
These kernels add in an order fixed by the indices: blocks of BLOCK consecutive values
in parallel, each left to right, then the block sums in index order. Sizes are runtime
arguments (`n`), so one compiled kernel serves every image size up to its fields' size.

- `broadcast_rows(src, n, dst, partial)`: dst[i, :] = src[:] for i < n[None] (a 0-d int field: a count an
  earlier kernel wrote, read on the device, so the host never waits for it). Its adjoint sums
  dst.grad over the rows into src.grad, in a fixed order: how a differentiated kernel
  gives every thread its own copy of the parameters (one gradient row each, no atomics
  shared between threads) and still gets one bit-reproducible parameter gradient.
- `sum_into(values, n, weight, partial, total)`: total += weight * sum(values[:n]).
- `weighted_sum(values, weights, total, history, slot)`: total = sum_k weights[k] * values[k] over a tuple of
  0-d fields, in the tuple's order (engine.fit_loss.WeightedSum), and a copy into history[slot].
- `compact(flags, n, capacity, partial, index, count)`: the indices of the set flags, in order
  (a stream compaction: counts per block, the block offsets in order, then each block's indices).
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint

BLOCK = 256


@ti.kernel
def broadcast_rows(src: ti.template(), n: ti.template(), dst: ti.template(), partial: ti.template()):
    """dst[i, j] = src[j] for i < n[None] (at most dst's rows). `partial` (a row per BLOCK rows of dst) is the
    adjoint's scratch."""
    rows = ti.min(n[None], dst.shape[0])
    for i, j in ti.ndrange(rows, src.shape[0]):
        dst[i, j] = src[j]


@custom_adjoint(broadcast_rows)
@ti.kernel
def broadcast_rows_adjoint(src: ti.template(), n: ti.template(), dst: ti.template(), partial: ti.template()):
    """src.grad[j] += dst.grad[0, j] + ... + dst.grad[n-1, j], in blocks of BLOCK rows, blocks in order."""
    rows = ti.min(n[None], dst.shape[0])
    for b, j in ti.ndrange((rows + BLOCK - 1) // BLOCK, src.shape[0]):
        acc = dst.grad[b * BLOCK, j] * 0.0
        for i in range(b * BLOCK, ti.min((b + 1) * BLOCK, rows)):
            acc += dst.grad[i, j]
        partial[b, j] = acc
    for j in range(src.shape[0]):
        acc = src.grad[j] * 0.0
        for b in range((rows + BLOCK - 1) // BLOCK):
            acc += partial[b, j]
        src.grad[j] += acc


@ti.kernel
def sum_into(values: ti.template(), n: ti.i32, weight: ti.f64, partial: ti.template(), total: ti.template()):
    """total[None] += weight * (values[0] + ... + values[n-1]), accumulated in total's precision.

    `partial` holds at least (n + BLOCK - 1) // BLOCK block sums."""
    for b in range((n + BLOCK - 1) // BLOCK):
        acc = ti.cast(0.0, total.dtype)
        for i in range(b * BLOCK, ti.min((b + 1) * BLOCK, n)):
            acc += ti.cast(values[i], total.dtype)
        partial[b] = acc
    ti.loop_config(serialize=True)
    for b in range((n + BLOCK - 1) // BLOCK):
        total[None] += ti.cast(weight, total.dtype) * partial[b]


@custom_adjoint(sum_into)
@ti.kernel
def sum_into_adjoint(values: ti.template(), n: ti.i32, weight: ti.f64, partial: ti.template(), total: ti.template()):
    """values.grad[i] += weight * total.grad for i < n."""
    for i in range(n):
        values.grad[i] += ti.cast(weight * total.grad[None], values.dtype)


@ti.kernel
def compact(flags: ti.template(), n: ti.i32, capacity: ti.i32, partial: ti.template(), index: ti.template(),
            count: ti.template()):
    """index[0 .. min(count, capacity)) = the i < n with flags[i] != 0, in increasing order; count[None] = how
    many flags were set. Flags past the first `capacity` set ones are cleared (their items are dropped).
    `partial` holds at least (n + BLOCK - 1) // BLOCK ints."""
    for b in range((n + BLOCK - 1) // BLOCK):
        c = 0
        for i in range(b * BLOCK, ti.min((b + 1) * BLOCK, n)):
            if flags[i] != 0:
                c += 1
        partial[b] = c
    for _ in range(1):  # the block offsets, in order (one thread)
        offset = 0
        for b in range((n + BLOCK - 1) // BLOCK):
            c = partial[b]
            partial[b] = offset
            offset += c
        count[None] = offset
    for b in range((n + BLOCK - 1) // BLOCK):
        c = partial[b]
        for i in range(b * BLOCK, ti.min((b + 1) * BLOCK, n)):
            if flags[i] != 0:
                if c < capacity:
                    index[c] = i
                else:
                    flags[i] = 0
                c += 1


@ti.kernel
def weighted_sum(values: ti.template(), weights: ti.template(), total: ti.template(), history: ti.template(),
                 slot: ti.i32):
    """total[None] = weights[0] * values[0][None] + weights[1] * values[1][None] + ..., added in that order, in
    total's precision (values: a tuple of 0-d fields, fixed per compiled instance; weights: a float64 field, one
    entry per term); with slot >= 0 also history[slot] = total, a record the host reads later, many in one wait.
    Taichi's adjoint: values[k].grad += weights[k] * total.grad, one element each, no race."""
    s = ti.cast(0.0, total.dtype)
    for k in ti.static(range(len(values))):
        s += ti.cast(weights[k], total.dtype) * ti.cast(values[k][None], total.dtype)
    total[None] = s
    if slot >= 0:
        history[slot] = s
