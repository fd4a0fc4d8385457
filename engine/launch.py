"""The single entry point for kernel launches: `launch(kernel, *args)`.

Every launch of the project's kernels (engine/kernels, engine/autodiff) from the engine and
the app goes through `launch` (tests/test_layers.py checks that none is called directly), and
every call of a compiled kernel that `launch` or the tape makes (a primal, or an adjoint
replayed by the tape) goes through `dispatch`. Not through here: Taichi's own data-movement
kernels behind `field.fill()`, `from_numpy()`, `to_numpy()` and ndarray copies (fills and
host <-> device copies: never differentiated, never recorded, so the tape's hazard checks do
not see them: fill or copy into a field before `with tape:`, or under `tape.pause()`), the
plain and native calls `engine/checks/dispatch_echo.py` compares on purpose, and the plain calls
`bench/` times. Two jobs, kept in one small place:

- recording: inside `with tape:` (engine.autodiff.tape.Tape) a launch is handed to the
  active recorder, which checks the gradient hazards, times it (when profiling) and
  keeps it for the reverse pass; outside a tape, or under `tape.pause()`, it just runs;
- dispatching: `dispatch(kernel, args)` is the one line that calls into Taichi, so a
  faster path (calling the compiled kernel through Taichi's runtime directly) replaces
  it here without touching any caller.

    from engine.launch import launch
    launch(affine, x, y, 2.0, 0.5)                 # runs now; recorded if a tape is active
    launch(sum_into, y, loss, name="sum y")         # the name shown by the tape inspector
    custom("closest points", forward, backward, reads=[x], writes=[idx])  # a step with a hand-written adjoint

This module knows recorders only through `push_recorder`/`pop_recorder` and the
members they must have (`Recorder`), so it imports nothing of the tape.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from engine.dispatch import call as native_call


class Recorder(Protocol):
    """What `launch` needs of a tape."""

    @property
    def recording(self) -> bool: ...

    def record(self, kernel: Callable, args: tuple, name: str) -> None: ...

    def record_custom(self, name: str, backward: Callable[[], None], *, forward: Callable[[], None] | None,
                      reads: Sequence[Any], writes: Sequence[Any]) -> Any: ...


# Active recorders, innermost last. One stack per process: Taichi launches belong to one thread
# (a launch from a second thread corrupted the CPU backend's SNode-tree bookkeeping when tried here).
_recorders: list[Recorder] = []


def kernel_name(kernel: Callable) -> str:
    """The Python name of a kernel (or of the function behind a Taichi adjoint)."""
    primal = getattr(kernel, "_primal", kernel)
    func = getattr(primal, "func", primal)
    return getattr(func, "__name__", type(kernel).__name__)


def dispatch(kernel: Callable, args: Sequence[Any]) -> None:
    """Run one compiled kernel (primal or adjoint) now: where `launch` and the tape call kernels.

    Natively (engine.dispatch.call): the compiled kernel is launched through Taichi's
    runtime with a cached launch context, bit-identical to `kernel(*args)`.
    """
    native_call(kernel, *args)


def recording() -> bool:
    """Whether a launch made now would be recorded (a tape is active and not paused)."""
    return bool(_recorders) and _recorders[-1].recording


def launch(kernel: Callable, *args: Any, name: str | None = None) -> None:
    """Launch `kernel(*args)`; the innermost active tape (if recording) records it."""
    if recording():
        _recorders[-1].record(kernel, args, name or kernel_name(kernel))
    else:
        dispatch(kernel, args)


def custom(name: str, forward: Callable[[], None], backward: Callable[[], None], *,
           reads: Sequence[Any] = (), writes: Sequence[Any] = ()) -> None:
    """Run `forward()`; inside a recording tape, also record `backward()` as its adjoint.

    For steps Taichi cannot differentiate (kernels with `while`/`break`, host work):
    the forward runs untaped and the backward you supply runs in its place in the
    reverse pass. `reads`/`writes` list the fields the forward reads and writes, for
    the tape's hazard checks and `zero_grad`. Outside a tape it just runs `forward()`.
    """
    if recording():
        _recorders[-1].record_custom(name, backward, forward=forward, reads=reads, writes=writes)
    else:
        forward()


def push_recorder(recorder: Recorder) -> None:
    _recorders.append(recorder)


def pop_recorder(recorder: Recorder) -> None:
    if not _recorders or _recorders[-1] is not recorder:
        raise RuntimeError("tapes must be exited in the reverse order they were entered")
    _recorders.pop()
