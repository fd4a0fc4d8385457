"""The tape: records kernel launches, replays their adjoints in reverse, refuses silent hazards.

Modelled on NVIDIA Warp's `wp.Tape`. Launches made through `engine.launch.launch`
inside `with tape:` are recorded (name, kernel, arguments, forward time);
`tape.backward(loss)` seeds d loss = 1 and runs each entry's adjoint (Taichi's
generated `kernel.grad`, the adjoint declared for the kernel with
`engine.autodiff.custom.custom_adjoint`, or the function a custom entry supplies) newest first.

    import taichi as ti
    from engine import backend
    from engine.autodiff.tape import Tape
    from engine.fields import FieldGroup
    from engine.kernels.elementwise import affine, sin_map, sum_into
    from engine.launch import launch

    backend.init("cpu")
    group = FieldGroup()
    x, y, z = (group.field(ti.f32, (8,), needs_grad=True) for _ in range(3))
    loss = group.field(ti.f32, (), needs_grad=True)
    group.finalize()
    x.fill(0.25)

    tape = Tape()
    with tape:
        launch(affine, x, y, 2.0, 0.5)      # y = 2x + 0.5
        launch(sin_map, y, z)               # z = sin(y)
        launch(sum_into, z, loss)           # loss = sum(z)
    tape.backward(loss)                     # x.grad = 2 cos(2x + 0.5)
    tape.reset()                            # zero every gradient it touched, forget the launches

Gradients accumulate (as in Warp and Taichi): call `zero_grad()` or `reset()` between
iterations. `with tape.pause():` runs launches without recording them.
`record_custom(name, backward, ...)` adds a step whose backward you write: how untaped
work (BVH queries: Taichi's AD rejects `while`/`break`) joins the reverse pass.

Hazards. Taichi's reverse pass reads the primal fields as they are when it runs, so
a taped launch that overwrites data an earlier taped launch read (or that it reads
itself), a second plain write to a field already written on the tape, or one field
passed as two arguments of which one is written, all give wrong gradients with no
error. The tape raises `TapeHazardError` naming the launch and the argument instead.
Read and write sets come from `engine.autodiff.access` (derived from kernel source).

Timing. With `profile=True` each launch and adjoint is bracketed by `ti.sync()` and
timed; otherwise `forward_s`/`backward_s` are None, because a sync per launch stalls
a GPU's launch queue. The UI's tape inspector turns profiling on.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import taichi as ti

from engine.autodiff.access import kernel_access
from engine.autodiff.custom import adjoint_of
from engine.autodiff.grad_kernels import fill_counted_rows, fill_rows, fill_value, fill_values
from engine.launch import dispatch, kernel_name, pop_recorder, push_recorder
from engine.taichi_private import Field, Ndarray

Buffer = Field | Ndarray


class TapeHazardError(RuntimeError):
    """A launch the tape refuses because Taichi would silently give wrong gradients."""


@dataclass
class TapeEntry:
    """One recorded step: a kernel launch, or a custom step with its own backward."""

    name: str
    kernel: Callable | None  # None for a custom step
    args: tuple
    adjoint: Callable | None = None  # the kernel's declared custom adjoint (else Taichi's kernel.grad)
    custom_backward: Callable[[], None] | None = None
    forward_s: float | None = None  # measured only when the tape profiles
    backward_s: float | None = None


def _is_buffer(value: Any) -> bool:
    return isinstance(value, (Field, Ndarray))


def _buffers_in(arg: Any) -> tuple:
    """The buffers an argument passes: itself, or each buffer of a tuple (a `ti.template()` tuple of fields, which a
    kernel unrolls with `ti.static`), or none."""
    if _is_buffer(arg):
        return (arg,)
    if isinstance(arg, tuple):
        return tuple(item for item in arg if _is_buffer(item))
    return ()


def grad_of(buffer: Any) -> Any:
    """The gradient buffer of a field or ndarray, or None if it was allocated without one."""
    grad = getattr(buffer, "grad", None)
    if isinstance(grad, Field) and grad._snode.ptr is None:  # declared but never placed
        return None
    return grad


def _fill(buffer: Any, value: float) -> None:
    """Set every element of a gradient on the device (fields by kernel; ndarrays by their own fill)."""
    if isinstance(buffer, Field):
        dispatch(fill_value, (buffer, value))
    else:
        buffer.fill(value)


def _run_adjoint(adjoint: Callable, args: tuple) -> None:
    """A declared adjoint: a Taichi kernel is dispatched natively, a Python function called."""
    if hasattr(adjoint, "_primal"):
        dispatch(adjoint, args)
    else:
        adjoint(*args)


def _launch_accesses(kernel: Callable, args: tuple, label: str) -> tuple[list, list]:
    """The buffers a launch reads and writes, as (buffer, argument) and (buffer, argument, accumulate only).

    Raises for hazard (3), one field passed as two arguments of which one is written, and
    for a buffer argument the source analysis cannot follow.
    """
    access = kernel_access(kernel)
    reads: list[tuple[Any, str]] = []
    writes: list[tuple[Any, str, bool]] = []
    by_buffer: dict[int, list[str]] = {}
    for param, buffer in ((p, b) for p, a in zip(access.params, args) for b in _buffers_in(a)):
        if param in access.opaque:
            raise TapeHazardError(
                f"{label}: cannot tell whether kernel {kernel_name(kernel)} reads or writes argument '{param}' "
                f"(it is used where the source analysis cannot follow it); state it with "
                f"engine.autodiff.access.declare_access({kernel_name(kernel)}, reads=..., writes=...)")
        by_buffer.setdefault(id(buffer), []).append(param)
        grad_path = f"{param}.grad"
        touched = [(param, buffer)]
        if grad_path in access.reads or grad_path in access.writes:  # rare: only hand-written adjoints
            touched.append((grad_path, grad_of(buffer)))
        for path, seen in touched:
            if seen is None:
                continue
            if path in access.reads:
                reads.append((seen, path))
            if path in access.writes:
                writes.append((seen, path, path in access.accumulates))
    written = {path for _, path, _ in writes}
    for params in by_buffer.values():
        if len(params) > 1 and written & set(params):
            raise TapeHazardError(
                f"{label}: the same field is passed as arguments {', '.join(repr(p) for p in params)} and "
                f"'{sorted(written & set(params))[0]}' is written; Taichi's adjoint would mix the two roles. "
                f"Pass a separate output field")
    return reads, writes


class Tape:
    """A tape of kernel launches: `with tape:` records every `engine.launch.launch`, `backward` replays adjoints.

    Args:
        profile: time each launch and each adjoint (`TapeEntry.forward_s`, `backward_s`, seconds),
            with a `ti.sync()` around each; off by default (a sync per launch stalls a GPU's queue).

    Attributes:
        entries (list[TapeEntry]): the recorded launches and custom steps, oldest first (name,
            kernel, arguments, times): what the desktop app's tape inspector shows.

    Raises:
        TapeHazardError: from a launch inside `with tape:` that would make Taichi's gradients
            silently wrong (overwriting what an earlier launch read, a second plain store, one field
            passed as two arguments of which one is written), or whose reads and writes the source
            analysis cannot follow; the launch does not run.
        RuntimeError: `with tape:` nested for one tape, `backward()` inside `with tape:`.

    Gradients accumulate in `field.grad` across `backward` calls, as in Warp and Taichi: `zero_grad()`
    or `reset()` between iterations. Fields, not ndarrays, for anything differentiated (Vulkan's
    ndarray gradients are zero in Taichi 1.7.4). A whole program: examples/tape_basics.py.

    Example:
        >>> import taichi as ti
        >>> from engine import backend
        >>> from engine.fields import FieldGroup
        >>> from engine.kernels.elementwise import affine, sum_into
        >>> from engine.launch import launch
        >>> _ = backend.init("cpu")
        >>> group = FieldGroup()
        >>> x, y = (group.field(ti.f32, (4,), needs_grad=True) for _ in range(2))
        >>> loss = group.field(ti.f32, (), needs_grad=True)
        >>> _ = group.finalize()
        >>> tape = Tape()
        >>> with tape:
        ...     launch(affine, x, y, 2.0, 0.5)          # y = 2x + 0.5
        ...     launch(sum_into, y, loss)               # loss = sum(y)
        >>> tape.backward(loss)
        >>> x.grad.to_numpy(), [entry.name for entry in tape.entries]
        (array([2., 2., 2., 2.], dtype=float32), ['affine', 'sum_into'])
        >>> tape.reset()                                # zero x.grad, y.grad, loss.grad; forget the entries
        >>> with tape:
        ...     launch(affine, x, x, 2.0, 0.5)          # x as input and output: refused, not run
        Traceback (most recent call last):
        engine.autodiff.tape.TapeHazardError: launch #0 'affine': the same field is passed as arguments 'x', 'y' ...
        >>> group.destroy()
    """

    def __init__(self, profile: bool = False):
        self.profile = profile
        self.entries: list[TapeEntry] = []
        self._active = False
        self._paused = 0
        self._replaying = False
        self._readers: dict[int, str] = {}  # id(buffer) -> "launch #i 'name' (argument 'p')" that first read it
        self._writers: dict[int, str] = {}  # id(buffer) -> who last wrote it with a plain store
        self._touched: dict[int, Any] = {}  # every buffer the tape saw, for zero_grad (kept alive here)
        self._rows: dict[int, int | Field] = {}  # id(field) -> the rows of its gradient zero_grad zeroes (`used_rows`)

    # -- recording ---------------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        return self._active and self._paused == 0 and not self._replaying

    def __enter__(self) -> "Tape":
        if self._active:
            raise RuntimeError("this tape is already active: `with tape:` blocks do not nest for one tape")
        self._active = True
        push_recorder(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._active = False
        pop_recorder(self)

    @contextmanager
    def pause(self) -> Iterator[None]:
        """Run the launches inside without recording them (work that needs no gradient)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def record(self, kernel: Callable, args: tuple, name: str) -> None:
        """Check `kernel(*args)` for hazards, run it, and append it (called by `launch`)."""
        label = f"launch #{len(self.entries)} '{name}'"
        reads, writes = _launch_accesses(kernel, args, label)
        adjoint = adjoint_of(kernel)
        # a declared adjoint reads what its author wrote it to read: scratch the forward itself
        # writes and reads back (a two-pass reduction's block sums) is no hazard for it
        self._check_writes(label, reads, writes, itself=adjoint is None)
        entry = TapeEntry(name, kernel, args, adjoint=adjoint)
        entry.forward_s = self._timed(dispatch, kernel, args)  # a launch Taichi rejects leaves no trace
        for buffer, path in reads:
            self._readers.setdefault(id(buffer), f"{label} (argument '{path}')")
        for buffer, path, accumulate in writes:
            if not accumulate:
                self._writers[id(buffer)] = f"{label} (argument '{path}')"
        for buffer in (buffer for arg in args for buffer in _buffers_in(arg)):
            self._touched[id(buffer)] = buffer
        self.entries.append(entry)

    def _check_writes(self, label: str, reads: list[tuple[Any, str]], writes: list[tuple[Any, str, bool]],
                      itself: bool = True) -> None:
        """Hazards (1) overwrite after read (by an earlier launch, or with `itself` by this one) and (2) a second
        plain store; see the module docstring."""
        read_here = {path for _, path in reads} if itself else set()
        for buffer, path, accumulate in writes:
            reader = self._readers.get(id(buffer)) or (f"{label} itself" if path in read_here else None)
            if reader:
                raise TapeHazardError(
                    f"{label}: argument '{path}' is overwritten after {reader} read it; the reverse pass would read "
                    f"the new values and give wrong gradients without an error. Write to a new field, or run this "
                    f"launch under tape.pause() if it needs no gradient")
            if not accumulate and id(buffer) in self._writers:
                raise TapeHazardError(
                    f"{label}: argument '{path}' was already written by {self._writers[id(buffer)]}; a second "
                    f"plain store breaks the reverse pass (only accumulation, +=, may follow). Write to a new field")

    def record_custom(self, name: str, backward: Callable[[], None], *, forward: Callable[[], None] | None = None,
                      reads: Iterable[Buffer] = (), writes: Iterable[Buffer] = ()) -> TapeEntry:
        """Append a step whose backward is `backward()`; run `forward()` first (untaped) if given.

        `reads`/`writes` name the buffers the forward step reads and writes, so the hazard
        checks and `zero_grad` cover them. The step's backward runs in its place in the
        reverse order; launches inside it are not recorded.
        """
        if not self._active:
            raise RuntimeError(f"record_custom('{name}') outside `with tape:`: custom steps are recorded in order")
        label = f"custom step #{len(self.entries)} '{name}'"
        reads, writes = list(reads), list(writes)
        for buffer in writes:
            if id(buffer) in self._readers or any(buffer is read for read in reads):
                raise TapeHazardError(f"{label}: it writes a buffer that {self._readers.get(id(buffer), 'it')} read; "
                                      f"the reverse pass would see the new values. Write to a new buffer")
        for buffer in reads:
            self._readers.setdefault(id(buffer), label)
        for buffer in reads + writes:
            self._touched[id(buffer)] = buffer
        entry = TapeEntry(name, None, (), custom_backward=backward)
        if forward is not None:
            with self.pause():
                entry.forward_s = self._timed(forward)
        self.entries.append(entry)
        return entry

    # -- reverse pass ------------------------------------------------------------------------

    def backward(self, loss: Buffer | None = None) -> None:
        """Seed d loss = 1 (every element of `loss`) and run the adjoints newest first.

        Args:
            loss: the field (any shape and float dtype, allocated with `needs_grad=True`) whose
                gradient is seeded with 1; None when the caller seeded the output gradients already.

        Raises:
            ValueError: `loss` has no gradient field. RuntimeError: called inside `with tape:`.
        """
        if self._active:
            raise RuntimeError("tape.backward() inside `with tape:`: call it after the with block")
        if loss is not None:
            grad = grad_of(loss)
            if grad is None:
                raise ValueError("tape.backward(loss): the loss has no gradient; allocate it with needs_grad=True")
            _fill(grad, 1.0)
        self._replaying = True
        push_recorder(self)  # launches made by custom backwards run unrecorded, even inside another tape
        try:
            for entry in reversed(self.entries):
                if entry.adjoint is not None:
                    entry.backward_s = self._timed(_run_adjoint, entry.adjoint, entry.args)
                elif entry.kernel is not None:
                    entry.backward_s = self._timed(dispatch, entry.kernel.grad, entry.args)
                else:
                    entry.backward_s = self._timed(entry.custom_backward)
        finally:
            pop_recorder(self)
            self._replaying = False

    def used_rows(self, field: Field, rows: int | Field) -> None:
        """Declare that the launches recorded since the last reset touched only the first `rows` rows (first axis)
        of `field`'s gradient: `zero_grad` then zeroes just those (the most declared since the last reset).

        For a buffer allocated at a maximum size and used at a smaller one (engine.diff_render: fields for 512x256,
        views of 256x128): zeroing 4x fewer rows. A declaration short of what a launch wrote leaves gradient behind
        for the next backward to add to, silently: declare from the same count the launches were given. `rows` may
        be a 0-d int field whose value an earlier kernel wrote (a count the host never reads): zero_grad then
        zeroes the rows it holds when zeroing, so the launches declared must all have used that count."""
        if isinstance(rows, Field):
            self._rows[id(field)] = rows
        else:
            self._rows[id(field)] = max(int(rows), self._rows.get(id(field), 0))

    def zero_grad(self, keep: Iterable[Buffer] = ()) -> None:
        """Zero the gradient of every field and array the tape has seen since the last reset (of a field declared
        with `used_rows`, those rows) but those of `keep`: the whole fields' gradients in one launch."""
        whole, kept = [], {id(buffer) for buffer in keep}
        for buffer in self._touched.values():
            grad = grad_of(buffer)
            if grad is None or id(buffer) in kept:
                continue
            rows = self._rows.get(id(buffer))
            if isinstance(rows, Field):
                dispatch(fill_counted_rows, (grad, rows, 0.0))
            elif rows is not None:
                if rows:
                    dispatch(fill_rows, (grad, min(rows, grad.shape[0]), 0.0))
            elif isinstance(grad, Field):
                whole.append(grad)
            else:
                grad.fill(0.0)
        if len(whole) > 1:
            dispatch(fill_values, (tuple(whole), 0.0))  # one compiled instance per set of fields: a loop's is fixed
        elif whole:
            dispatch(fill_value, (whole[0], 0.0))

    def reset(self, keep: Iterable[Buffer] = ()) -> None:
        """Zero the gradients (but those of `keep`, which the next backward adds to: a sum over evaluations) and
        forget every entry, ready for the next iteration."""
        self.zero_grad(keep)
        self.entries.clear()
        self._readers.clear()
        self._writers.clear()
        self._touched.clear()
        self._rows.clear()

    def _timed(self, fn: Callable, *args: Any) -> float | None:
        if not self.profile:
            fn(*args)
            return None
        ti.sync()
        start = time.perf_counter()
        fn(*args)
        ti.sync()
        return time.perf_counter() - start
