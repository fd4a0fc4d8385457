"""engine.kernel_count: one count per kernel instance Taichi prepares, live across the process boundary."""

import numpy as np
import taichi as ti

from engine import kernel_count
from engine.worker import BackendWorker


@ti.kernel
def _scale(x: ti.template(), a: ti.f32):
    for i in x:
        x[i] *= a


@ti.kernel
def _total(x: ti.template(), out: ti.template()):
    for i in x:
        out[None] += x[i] * x[i]


def test_each_kernel_instance_counts_once_and_its_adjoint_apart(ti_cpu):
    a, b = ti.field(ti.f32, 4, needs_grad=True), ti.field(ti.f32, 8)
    out = ti.field(ti.f32, (), needs_grad=True)
    start = kernel_count.prepared()
    _scale(a, 2.0)
    _scale(a, 3.0)  # the same instance (a runtime argument changed): prepared already
    assert kernel_count.prepared() - start == 1
    _scale(b, 2.0)  # another field: another instance
    assert kernel_count.prepared() - start == 2
    _total(a, out)
    _total.grad(a, out)  # the adjoint is a kernel of its own
    _total.grad(a, out)
    assert kernel_count.prepared() - start == 4


def test_a_worker_shares_its_count_with_the_parent():
    with BackendWorker("cpu") as worker:
        before = worker.kernels_prepared
        worker.call("affine", x=np.ones(4, np.float32))
        first = worker.kernels_prepared - before
        worker.call("affine", x=np.ones(4, np.float32))
        second = worker.kernels_prepared - before - first
    # "affine" allocates its fields anew on every call: the same kernels again, new instances, counted in the
    # worker and read here
    assert first > 0 and second == first


@ti.kernel
def _twice(x: ti.f32) -> ti.f32:
    return 2.0 * x


def test_each_first_compile_is_said_once_with_its_number_and_name(ti_cpu, monkeypatch):
    import contextlib

    from engine import progress

    said = []
    monkeypatch.setattr(progress, "kernel_compiling", lambda k, name: said.append((k, name)) or contextlib.nullcontext())
    a, out = ti.field(ti.f32, 4, needs_grad=True), ti.field(ti.f32, (), needs_grad=True)
    assert _twice(1.5) == 3.0 and _twice(2.0) == 4.0
    _total(a, out)
    _total.grad(a, out)
    _total.grad(a, out)
    assert [name for _, name in said] == ["_twice", "_total", "_total adjoint"]
    assert [k for k, _ in said] == list(range(said[0][0], said[0][0] + 3))  # the count, kernel by kernel


def test_the_compile_line_is_erased_and_only_on_a_terminal(monkeypatch, caplog):
    import io
    import logging

    from engine import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    caplog.set_level(logging.INFO, logger="engine")
    for stream, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        with progress.kernel_compiling(7, "shade_slots adjoint"):
            during = stream.getvalue()
        assert ("compiling kernel 7 (shade_slots adjoint;" in during) == shown
        assert stream.getvalue().endswith("\r\x1b[2K") == shown  # erased once it is done
