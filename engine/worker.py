"""A Taichi backend in its own process: start it once, call named computations on it.

Taichi holds one arch per process, so comparing two backends needs two processes.
`BackendWorker("vulkan")` spawns a process that starts that backend and then serves
calls; each call names a computation (see `engine.computations`) and passes numpy
inputs; the answer comes back as a dict of numpy arrays. A worker that dies or does
not answer in time raises `WorkerError` with a one-line reason, and is gone.

    with BackendWorker("cpu") as worker:
        out = worker.call("affine", x=np.ones(4, np.float32))
"""
from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any

from engine.errors import UserError

DEFAULT_TIMEOUT_S = 300.0


class WorkerError(UserError):
    """A backend worker failed: it could not start, raised, died or hung."""


def _serve(conn, arch: str) -> None:
    """Child process: start the backend, then answer (name, inputs) requests until None."""
    from engine import backend, computations

    try:
        info = backend.init(arch)
    except Exception as exc:  # report startup failure as data; the parent raises it
        conn.send(("error", str(exc)))
        return
    conn.send(("ready", info.as_record()))
    while True:
        request = conn.recv()
        if request is None:
            return
        name, inputs = request
        try:
            conn.send(("ok", computations.run(name, **inputs)))
        except Exception as exc:
            last = traceback.format_exc().strip().splitlines()[-1]
            conn.send(("error", f"{name} raised {last}" if str(exc) else f"{name} raised {type(exc).__name__}"))


class BackendWorker:
    """One backend in a child process. See the module docstring."""

    def __init__(self, arch: str, start_timeout_s: float = 120.0):
        self.arch = arch
        ctx = mp.get_context("spawn")  # fork would copy a running Taichi runtime
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, arch), daemon=True, name=f"taichi-{arch}")
        self._process.start()
        child.close()
        status, payload = self._receive(start_timeout_s, "start")
        if status != "ready":
            self.close()
            raise WorkerError(payload)
        self.backend: dict = payload  # the record of what actually runs there

    def _receive(self, timeout_s: float, what: str) -> tuple[str, Any]:
        if not self._conn.poll(timeout_s):
            self._kill()
            raise WorkerError(f"{self.arch} worker did not {what} within {timeout_s:.0f} s and was stopped")
        try:
            return self._conn.recv()
        except (EOFError, ConnectionResetError):
            self._process.join(5)
            code = self._process.exitcode
            self._kill()
            hint = (" (a script that starts workers must do so under `if __name__ == \"__main__\":`, "
                    "since the worker imports the script again)") if what == "start" and code == 1 else ""
            raise WorkerError(f"{self.arch} worker died during {what} (exit code {code}){hint}") from None

    def call(self, name: str, timeout_s: float = DEFAULT_TIMEOUT_S, **inputs: Any) -> dict:
        """Run computation `name` with `inputs` on this worker's backend and return its outputs."""
        if not self.alive:
            raise WorkerError(f"{self.arch} worker is not running")
        try:
            self._conn.send((name, inputs))
        except (BrokenPipeError, OSError):
            self._kill()
            raise WorkerError(f"{self.arch} worker died before {name}") from None
        status, payload = self._receive(timeout_s, name)
        if status != "ok":
            raise WorkerError(f"{self.arch} worker: {payload}")
        return payload

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def _kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(5)
        self._conn.close()

    def kill(self) -> None:
        """Stop the worker now, even in the middle of a call (the GUI does this on exit)."""
        self._kill()

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not."""
        if self._process.is_alive():
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
