"""A Taichi backend in its own process: start it once, call named computations on it.

Taichi holds one arch per process, so comparing two backends needs two processes.
`BackendWorker("vulkan")` spawns a process that starts that backend and then serves
calls; each call names a computation (see `engine.computations`: the name is resolved
in the calling process, so computations registered by the app work too) and passes numpy
inputs; the answer comes back as a dict of numpy arrays.

What can go wrong, and what the caller gets (always one line in `str(exc)`):

- bad input inside the worker (its `UserError`: an unavailable backend, a bad mesh file):
  `WorkerUserError`, which is a `UserError` (exit code 2), and the worker lives on;
- a bug inside the worker (any other exception): `WorkerError` whose `detail` holds the
  worker's full traceback (the CLI writes it to a crash log: exit code 3); the worker lives on;
- the worker dies, is stopped (SIGSTOP) or wedged: `WorkerError`, and the worker is gone.
  While a call is out the parent watches the process every `WATCH_S`: a dead process is
  reported at once, a stopped one after `STOPPED_GRACE_S`, one asleep without using any
  CPU time for `IDLE_LIMIT_S` (a deadlock, a hang) then, and any call at its deadline.

Workers ignore SIGINT: a Ctrl-C in the terminal reaches every process of the group, and
the parent, not the worker, decides what stops (it closes its workers). A worker whose
parent went away (its pipe closed) exits quietly. A busy worker asked to leave
(`request_exit`: SIGUSR1) ends its call after the kernel it is compiling or running and
leaves through Python's exit, which writes what it compiled to the kernel cache (the
window's exit does this rather than kill a worker that is compiling).

`kill` and `close` may be called any number of times, from any thread, also while another
thread waits in `call` (the GUI closes a worker its link thread is using): the process is
killed at once, but the pipe is closed by the last thread to stop using it (the caller sees
the end of the pipe, raises `WorkerError` and closes it), never under it, and never twice.
Closing a pipe's file descriptor under a thread polling it, or twice, raised `OSError:
[Errno 9] Bad file descriptor` (and could close a file that had meanwhile got the number).

    with BackendWorker("cpu") as worker:
        out = worker.call("affine", x=np.ones(4, np.float32))
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Any, Iterator

from engine import computations
from engine.errors import UserError
from engine.interrupt import signals_ignored

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 900.0  # a backstop: a cold compile of the differentiable renderer took > 300 s on a loaded
# 2-core machine; a worker that hangs without using CPU is caught by IDLE_LIMIT_S long before
WATCH_S = 0.25  # how often a waiting parent looks at the worker process
STOPPED_GRACE_S = 2.0  # a worker stopped (SIGSTOP, a debugger) this long is given up
IDLE_LIMIT_S = 20.0  # a worker asleep this long in a call without using CPU time is wedged


class WorkerError(Exception):
    """A backend worker failed: it raised (a bug: `detail` is its traceback), died, hung or was stopped."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


class WorkerUserError(WorkerError, UserError):
    """The worker reported bad input or an unusable machine (its own `UserError`): exit code 2."""


def _leave(signum: int, frame: Any) -> None:
    """SIGUSR1 (`BackendWorker.request_exit`): leave through Python's exit, which writes the kernel cache. A second
    request (the window's exit asks more than once) is ignored: raised during that exit, it would cut the write."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    raise SystemExit(0)


def _serve(conn, arch: str, kernels_prepared) -> None:
    """Child process: start the backend, then answer (name, inputs) requests until None or the pipe closes.
    kernels_prepared: a shared integer the child keeps at its count of kernels prepared (engine.kernel_count)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent shuts us down (see the module docstring)
    signal.signal(signal.SIGUSR1, _leave)
    from engine import backend

    try:
        info = backend.init(arch)
    except UserError as exc:  # report startup failure as data; the parent raises it
        conn.send(("user_error", str(exc)))
        return
    except Exception as exc:
        conn.send(("error", f"backend {arch} failed to start: {_last_line(exc)}", traceback.format_exc()))
        return
    from engine import kernel_count  # imports Taichi: only once the backend has started

    kernel_count.share(kernels_prepared)
    conn.send(("ready", info.as_record()))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if request is None:
            return
        name, target, inputs = request
        try:
            reply = ("ok", computations.run(target, **inputs))
        except UserError as exc:
            reply = ("user_error", str(exc))
        except Exception as exc:
            reply = ("error", f"{name} raised {_last_line(exc)}", traceback.format_exc())
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[-1]}" if text else type(exc).__name__


def exit_description(code: int | None) -> str:
    """A process exit code in words: "exit code 3", "killed by SIGKILL"."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, CPU ticks used) of a process from /proc, or None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[11]) + int(fields[12])  # state, utime + stime (all threads)


class BackendWorker:
    """One backend in a child process. See the module docstring."""

    def __init__(self, arch: str, start_timeout_s: float = 120.0):
        self.arch = arch
        ctx = mp.get_context("spawn")  # fork would copy a running Taichi runtime
        self._conn, child = ctx.Pipe()
        self._lock = threading.RLock()  # guards killing the process and closing the pipe
        self._users: set[int] = set()  # the threads sending on or waiting on the pipe now (in a call or close)
        self._killed = False
        self._kernels = ctx.Value("i", 0, lock=False)  # one writer (the child), read whole: no lock needed
        self._process = ctx.Process(target=_serve, args=(child, arch, self._kernels), daemon=True,
                                    name=f"taichi-{arch}")
        with signals_ignored():  # the child starts with SIGINT ignored, before _serve can say so itself
            self._process.start()
        child.close()
        reply = self._receive(start_timeout_s, "start-up")
        if reply[0] != "ready":
            self.close()
            self._raise(reply)
        self.backend: dict = reply[1]  # the record of what actually runs there
        log.debug("%s worker started (pid %d)", arch, self._process.pid)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _raise(self, reply: tuple) -> None:
        if reply[0] == "user_error":
            raise WorkerUserError(reply[1])
        raise WorkerError(f"{self.arch} worker: {reply[1]}", reply[2] if len(reply) > 2 else "")

    def _watch(self, timeout_s: float, what: str) -> None:
        """Wait for an answer to `what` ("start-up", "computation NAME"); kill the worker and raise if it is
        stopped, wedged or past its deadline."""
        deadline = time.monotonic() + timeout_s
        stopped_since = idle_since = None
        last_ticks = -1
        while not self._conn.poll(WATCH_S):
            if not self._process.is_alive():
                return  # the pipe reports it: recv raises EOFError
            now = time.monotonic()
            stat = _proc_stat(self._process.pid)
            if stat is not None:
                state, ticks = stat
                stopped_since = (stopped_since or now) if state in "Tt" else None
                asleep = state in "SD" and ticks == last_ticks
                idle_since = (idle_since or now) if asleep else None
                last_ticks = ticks
                if stopped_since is not None and now - stopped_since >= STOPPED_GRACE_S:
                    self._fail(f"was stopped (SIGSTOP?) for {now - stopped_since:.0f} s during {what}")
                if idle_since is not None and now - idle_since >= IDLE_LIMIT_S:
                    self._fail(f"made no progress for {now - idle_since:.0f} s during {what} (asleep, no CPU time "
                               "used: wedged)")
            if now >= deadline:
                self._fail(f"did not finish {what} within {timeout_s:.0f} s")

    def _fail(self, why: str) -> None:
        pid = self._process.pid
        self._kill()
        raise WorkerError(f"{self.arch} worker (pid {pid}) {why} and was stopped")

    def _receive(self, timeout_s: float, what: str) -> tuple:
        self._watch(timeout_s, what)
        try:
            return self._conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            with self._lock:  # a `kill` from another thread may be reaping it: its exit code once that is done
                self._process.join(5)
                code = self._process.exitcode
            self._kill()
            hint = (" (a script that starts workers must do so under `if __name__ == \"__main__\":`, "
                    "since the worker imports the script again)") if what == "start-up" and code == 1 else ""
            raise WorkerError(f"{self.arch} worker died during {what} ({exit_description(code)}){hint}") from None

    def call(self, name: str, timeout_s: float = DEFAULT_TIMEOUT_S, **inputs: Any) -> dict:
        """Run computation `name` with `inputs` on this worker's backend and return its outputs."""
        try:
            target = computations.resolve(name)  # here: the worker knows only the engine's own names
        except KeyError as exc:
            raise WorkerError(f"{self.arch} worker: {exc.args[0]}") from None
        with self._using():
            if not self.alive or self._conn.closed:
                raise WorkerError(f"{self.arch} worker is not running")
            try:
                self._conn.send((name, target, inputs))
            except (BrokenPipeError, OSError):
                self._kill()
                raise WorkerError(f"{self.arch} worker died before {name}") from None
            reply = self._receive(timeout_s, f"computation {name}")
        if reply[0] != "ok":
            self._raise(reply)
        return reply[1]

    @property
    def kernels_prepared(self) -> int:
        """How many Taichi kernels the worker has begun to prepare (compile or load) so far, live during a call."""
        return int(self._kernels.value)

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    @contextmanager
    def _using(self) -> Iterator[bool]:
        """This thread sends on and waits on the pipe: a `kill` meanwhile leaves the pipe open, and the last thread
        to leave closes it. Yields whether another thread uses the pipe too."""
        me = threading.get_ident()
        with self._lock:
            shared = bool(self._users - {me})
            self._users.add(me)
        try:
            yield shared
        finally:
            with self._lock:
                self._users.discard(me)
                if self._killed and not self._users and not self._conn.closed:
                    self._conn.close()

    def _kill(self) -> None:
        """Kill the process (if it still runs) and close the pipe, unless another thread is using it (then the last
        one to leave closes it). Safe to call twice and from two threads at once (see the module docstring)."""
        with self._lock:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(5)
            self._killed = True
            if not self._users - {threading.get_ident()} and not self._conn.closed:
                self._conn.close()

    def kill(self) -> None:
        """Stop the worker now, even in the middle of a call. Idempotent."""
        self._kill()

    def request_exit(self) -> None:
        """Ask a worker that may be in a call to leave as soon as it is back in Python (after the kernel it compiles
        or runs now), through Python's exit, so that what it compiled is written to the kernel cache (a kill loses
        it). Returns at once: wait for `alive` to turn false, then `close` (or `kill` one that did not leave). The
        caller of a call under way gets a WorkerError."""
        pid = self._process.pid
        if pid is not None and self._process.is_alive():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not (at once if it is stopped, or if another thread is in a
        call on it). Idempotent."""
        with self._using() as shared:  # shared: another thread is in a call, and this one must not write between
            stat = _proc_stat(self._process.pid) if self._process.is_alive() else None
            if self._process.is_alive() and not (stat and stat[0] in "Tt") and not self._conn.closed and not shared:
                try:
                    self._conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
                self._process.join(10)
            self._kill()

    def __enter__(self) -> "BackendWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
