"""Ray for a batch: an embedded Ray on this machine, or a cluster; one task per job; nothing left behind.

    with RaySession(address=None, cpus=2) as ray_session:       # embedded; address "HOST:PORT" joins a cluster
        unfinished = ray_session.run(jobs, on_result, retries=2, on_wait=None)

The only module that imports Ray (the optional `batch` extra).

- **Embedded** (no address, no RAY_ADDRESS): a private Ray on this machine with `cpus` CPUs, no
  dashboard, no usage statistics, its temp folder in the system temp (removed afterwards, with the
  workers' job folders: it is their TMPDIR, so a killed worker leaves nothing behind either), token
  authentication with a token made for this batch (Ray's ports listen on every interface).
  On the way out, after `ray.shutdown()`, any process still carrying this session's marker in its
  environment is ended by pid: killing the driver of an embedded Ray was seen to leave
  `ray::DashboardAgent` and `ray::RuntimeEnvAgent` running. Ray's own processes are started with
  SIGINT ignored, so Ctrl-C at the terminal reaches the driver only, which stops them in order.
- **Cluster** (`--address HOST:PORT` or RAY_ADDRESS): the address is checked with a plain TCP
  connection first and `ray.init` is given `connect_timeout` seconds (Ray itself retries for
  minutes), each a one-line error. With token authentication (`RAY_AUTH_MODE=token`), the driver
  needs the cluster's token in RAY_AUTH_TOKEN.
- **Tasks:** `num_cpus` = the job's threads; `num_gpus=1` when the job's backend is cuda (or auto)
  and the cluster has GPUs (a cuda job on a cluster without any runs and becomes the backend's
  error row, never a cpu run); `max_retries` for a worker that dies mid-task (the job starts over
  in a new worker); CPU workers are recycled after MAX_CALLS jobs (each job leaves some memory behind).
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from typing import Callable

import ray

from app.batch import execute
from app.batch.jobs import Job
from engine.errors import Interrupted, UserError
from engine.interrupt import graceful_stop, signals_ignored

MARKER_ENV = "SHANNON_BATCH_SESSION"  # in the environment of every process of an embedded session
MAX_CALLS = 10  # jobs per CPU worker process before Ray replaces it


def _task(job: Job) -> dict:
    """The Ray task: one job in this worker (app.batch.execute), plus the node it ran on."""
    result = execute.run_job(job)
    result["row"]["node"] = ray.util.get_node_ip_address()
    return result


def _parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {address}: expected HOST:PORT (the head node's address printed by `ray start --head`)")
    return host, int(port)


def _marked_pids(marker: str) -> list[int]:
    """Processes (not this one) whose environment carries this session's marker."""
    needle = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def end_marked_processes(marker: str, grace_s: float = 5.0) -> list[int]:
    """SIGTERM every process carrying `marker`, SIGKILL those left after `grace_s`; return the pids ended."""
    ended = _marked_pids(marker)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _marked_pids(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while _marked_pids(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
    return ended


def task_options(job: Job, cluster_gpus: float, retries: int) -> dict:
    """Ray options of a job's task: its CPUs, one GPU when its backend is cuda (or auto) and the cluster
    has GPUs, retries for a dead worker (a failed job is a row, never an exception to retry)."""
    on_gpu = job.arch in ("cuda", "auto") and cluster_gpus > 0
    return {"num_cpus": job.threads, "num_gpus": 1 if on_gpu else 0, "max_retries": retries,
            "retry_exceptions": False, "name": f"batch {job.kind} {job.name}"}


class RaySession:
    """A connection to Ray for one batch (see the module docstring)."""

    def __init__(self, address: str | None = None, cpus: int | None = None, connect_timeout: float = 60.0):
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.cpus = cpus
        self.connect_timeout = connect_timeout
        self.marker = ""
        self.temp_dir = ""
        self.started_s = 0.0
        self.leftovers: list[int] = []  # processes the embedded session left that we ended
        self._tmpdir: str | None = None  # TMPDIR before the embedded session set its own

    @property
    def mode(self) -> str:
        return "cluster" if self.address else "embedded"

    def __enter__(self) -> "RaySession":
        started = time.perf_counter()
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        try:
            self._join() if self.address else self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.started_s = time.perf_counter() - started
        return self

    def _join(self) -> None:
        host, port = _parse_address(self.address)
        try:
            socket.create_connection((host, port), timeout=min(self.connect_timeout, 10.0)).close()
        except OSError as exc:
            raise UserError(f"--address {self.address}: no Ray head answers there ({exc.strerror or exc})") from None
        # ray.init retries for minutes and its C++ core logs every retry on stderr (fd 2): hold those
        # lines, and let a watcher give up with one line on a refused token or after connect_timeout.
        with tempfile.TemporaryFile() as held:
            saved = os.dup(2)
            os.dup2(held.fileno(), 2)
            connected = threading.Event()
            threading.Thread(target=self._watch, args=(held.fileno(), saved, connected), daemon=True).start()
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR)
            except ConnectionError as exc:
                raise UserError(f"--address {self.address}: {str(exc).strip().splitlines()[0]}") from None
            finally:
                connected.set()
                os.dup2(saved, 2)
                os.close(saved)

    def _watch(self, held: int, saved: int, connected: threading.Event) -> None:
        deadline = time.monotonic() + self.connect_timeout
        while not connected.wait(0.2):
            refused = b"InvalidAuthToken" in os.pread(held, 1 << 20, 0)
            if refused or time.monotonic() > deadline:
                reason = ("the cluster refused this command's token: set RAY_AUTH_MODE=token and the cluster's "
                          "RAY_AUTH_TOKEN" if refused else
                          f"Ray did not connect within {self.connect_timeout:g} s (is a Ray head listening there?)")
                # Written to the saved stderr while fd 2 stays held: Ray's core may log again before _exit.
                os.write(saved, f"error: --address {self.address}: {reason}\n".encode())
                os._exit(2)  # ray.init cannot be interrupted from another thread; nothing local was started

    def _start(self) -> None:
        self.marker = secrets.token_hex(8)
        os.environ[MARKER_ENV] = self.marker
        if not os.environ.get("RAY_AUTH_TOKEN_PATH"):
            os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # Ray would write one into ~/.ray
        self.temp_dir = tempfile.mkdtemp(prefix="shannon-ray-")  # short: Ray's socket paths must fit 107 bytes
        self._tmpdir = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = self.temp_dir  # the workers' job folders too: a killed worker's go with the session
        with signals_ignored():  # inherited by Ray's processes (see the module docstring)
            ray.init(address="local", num_cpus=self.cpus, include_dashboard=False, _temp_dir=self.temp_dir,
                     log_to_driver=False, logging_level=logging.ERROR)

    def __exit__(self, *exc_info) -> None:
        with signals_ignored():  # a second Ctrl-C must not stop the clean-up
            if ray.is_initialized():
                ray.shutdown()
            if self.marker:
                self.leftovers = end_marked_processes(self.marker)
                os.environ.pop(MARKER_ENV, None)
            if self.temp_dir:
                shutil.rmtree(self.temp_dir, ignore_errors=True)
                if self._tmpdir is None:
                    os.environ.pop("TMPDIR", None)
                else:
                    os.environ["TMPDIR"] = self._tmpdir

    def resources(self) -> dict[str, float]:
        """The cluster's totals: {"CPU": ..., "GPU": ..., "nodes": ...}."""
        total = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        return {"CPU": total.get("CPU", 0.0), "GPU": total.get("GPU", 0.0), "nodes": nodes}

    def run(self, jobs: list[Job], on_result: Callable[[Job, dict], None], retries: int = 2,
            on_wait: Callable[[int], None] | None = None) -> None:
        """Run every job as a task; call `on_result(job, result)` as each finishes (in this thread) and
        `on_wait(in_flight)` twice a second. Ctrl-C or SIGTERM (`Interrupted`) cancels the tasks left and passes on."""
        gpus = self.resources()["GPU"]
        tasks = {False: ray.remote(max_calls=MAX_CALLS)(_task), True: ray.remote(_task)}  # GPU: Ray's one job per process
        pending = {}
        for job in jobs:
            options = task_options(job, gpus, retries)
            pending[tasks[options["num_gpus"] > 0].options(**options).remote(job)] = job
        # A signal only raises a flag here: an exception raised by a handler while Ray's C++ code waits
        # comes out as a SystemError; the loop looks at the flag every half second instead.
        with graceful_stop() as stop:
            try:
                while pending and not stop:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                    for ref in ready:
                        job = pending.pop(ref)
                        on_result(job, self._result(job, ref))
                    if on_wait:
                        on_wait(len(pending))
            except (Interrupted, KeyboardInterrupt):  # a second Ctrl-C, or outside the CLI's handlers
                stop.request("SIGINT")
            if stop:
                for ref in pending:
                    try:
                        ray.cancel(ref, force=True)
                    except Exception:  # already finished or its worker gone: nothing left to stop
                        pass
                raise Interrupted(stop.signal_name)

    @staticmethod
    def _result(job: Job, ref) -> dict:
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:  # the task's worker died more often than max_retries, a node was lost
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return {"row": {"job": job.name, "status": "error", "error": f"Ray: {type(exc).__name__}: {reason}",
                            "pid": "", "backend": "", "node": ""}, "files": {}, "log": str(exc)}
