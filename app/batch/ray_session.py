"""Ray for a batch: an embedded Ray on this machine, or a cluster; one task per job; nothing left behind.

    with RaySession(address=None, cpus=2, log=out / "ray.log") as ray_session:  # address "HOST:PORT" joins a cluster
        unfinished = ray_session.run(jobs, on_result, retries=2, on_wait=None)
        print("a line of ours", file=ray_session.console)

The only module that imports Ray (the optional `batch` extra).

- **Embedded** (no address, no RAY_ADDRESS): a private Ray on this machine with `cpus` CPUs, no
  dashboard, no usage statistics, its temp folder in the system temp (removed afterwards, with the
  workers' job folders: it is their TMPDIR, so a killed worker leaves nothing behind either), token
  authentication with a token made for this batch, and a loopback node address (LOOPBACK_NODE) where
  this machine has one (see "Ports" below). On the way out, after `ray.shutdown()`, any process still
  carrying this session's marker in its environment is ended by pid: killing the driver of an embedded
  Ray was seen to leave `ray::DashboardAgent` and `ray::RuntimeEnvAgent` running. Ray's own processes
  are started with SIGINT ignored, so Ctrl-C at the terminal reaches the driver only, which stops them in order.
- **Workers at normal priority** (embedded): Ray starts its workers at nice 15 unless told otherwise
  (`RAY_worker_niceness`, read by its raylet), where any other work on the machine starves them: beside
  two busy loops on 2 cores a batch of 4-iteration fits overran 7 minutes and a quick job overran
  `--job-timeout 90` (measured). The embedded session sets it to 0, as a `fit` run in a terminal runs,
  unless the environment sets it. A cluster's workers run at the niceness its nodes were started with
  (`RAY_worker_niceness=0 ray start ...` for normal priority).
- **Cluster** (`--address HOST:PORT` or RAY_ADDRESS): the address is checked with a plain TCP
  connection first and `ray.init` is given `connect_timeout` seconds (Ray itself retries for
  minutes), each a one-line error. With token authentication (`RAY_AUTH_MODE=token`), the driver
  needs the cluster's token in RAY_AUTH_TOKEN.
- **Nothing but Ray and Python on a node:** a cluster's tasks run our code from a copy that travels
  with the job (Ray's runtime environment `working_dir`: the `app` and `engine` packages and the
  real targets' meshes, staged in a temp folder), never from this checkout's path, which Ray would
  otherwise put on every worker's sys.path. A fit's mesh file travels as bytes in the object store
  (read here once per file, `ray.put`), in embedded sessions too; the task writes it into its own
  temp folder and fits that copy (app.batch.execute), so no node reads the path the user gave.
- **Ray's own output:** while the session is up, file descriptors 1 and 2 point at `log` (appended to;
  without one, a temp file that goes with the session), so what Ray prints -- its C++ core on stderr,
  the driver's thread that relays cluster errors on stdout (on a lost node: the raylet's last 20 log
  lines, twice, and a notice per retried task), anything its processes inherit -- lands there;
  `console` is the terminal's stderr for this batch's own lines. A run after which Ray wrote nothing
  leaves the file as it was.
- **Ports** (measured with Ray 2.60, `listening`): the GCS, each raylet (two ports), every worker and
  this driver's core worker listen on every interface (0.0.0.0 / ::), whatever the node's address:
  Ray has no setting to bind them to loopback, and `ray.init(_node_ip_address="127.0.0.1")` or
  `ray start --node-ip-address=127.0.0.1` registers the machine's routable address instead. Another
  loopback address is kept (so an embedded session registers LOOPBACK_NODE, and its runtime-env agent,
  the one server that binds the node's address, listens on loopback only), and token authentication
  refuses any client without the session's token (the measurement: docs/results-log.md).
- **Tasks:** `num_cpus` = the job's threads; `num_gpus=1` when the job's backend is cuda (or auto)
  and the cluster has GPUs (a cuda job on a cluster without any runs and becomes the backend's
  error row, never a cpu run); `max_retries` for a worker or a node that dies mid-task (the job starts
  over in a new worker, on any live node); CPU workers are recycled after MAX_CALLS jobs (each job leaves some memory behind).
- **Requests no node can meet** (`--cpus-per-task` over every node's CPUs, or with the GPU a cuda job
  asks for, over every GPU node's): Ray would queue such a task forever, silently. `check_feasible`
  compares the request with each live node's totals once the session is up, and refuses the batch
  in one line (exit 2) before any task is submitted; the session is then ended as always (its temp
  folder removed). A cluster's autoscaler that would add a bigger node is not waited for.
- **Per-job timeout** (`job_timeout`, `batch --job-timeout`): each task first tells a small actor
  (`_Clock`, 0 CPUs, made only when a timeout is set) that it started, with its pid and node; the
  actor times every job on its one clock (no skew between nodes), so a job's time starts when it
  starts in its worker, not while it waits for a free CPU (a retried job starts again). A job past
  the limit is cancelled with `force=True`: Ray kills its worker and does not retry it; its row is
  `timed_out`, and the other jobs go on. (On a cluster the killed job's temporary folder stays in
  that node's temp folder; an embedded session's goes with the session's.)
"""
from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

import ray

from app.batch import execute
from app.batch.jobs import Job, input_file
from engine.errors import Interrupted, UserError
from engine.interrupt import graceful_stop, signals_ignored

MARKER_ENV = "SHANNON_BATCH_SESSION"  # in the environment of every process of an embedded session
WORKER_NICENESS_ENV = "RAY_worker_niceness"  # Ray's workers' nice value (its default: 15)
MAX_CALLS = 10  # jobs per CPU worker process before Ray replaces it
LOOPBACK_NODE = "127.0.0.2"  # an embedded session's node address: Ray replaces 127.0.0.1 by the routable one


def _task(job: Job, clock=None, mesh: bytes | str | None = None) -> dict:
    """The Ray task: one job in this worker (app.batch.execute), plus the node it ran on; with a
    `clock` (a `_Clock` handle) it first says it started; `mesh` is the job's input file, shipped."""
    node = (ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id())
    if clock is not None:
        clock.start.remote(job.name, os.getpid(), node)
    result = execute.run_job(job, mesh)
    result["row"]["node"], result["row"]["node_id"] = node  # an address can hide several nodes; the id cannot
    return result


class _Clock:
    """Ray actor: when each running job started in its worker, on this one process's clock."""

    def __init__(self):
        # job name -> (monotonic time, pid, node: (address, Ray's node id))
        self.started: dict[str, tuple[float, int, tuple[str, str]]] = {}

    def start(self, name: str, pid: int, node: tuple[str, str]) -> None:
        self.started[name] = (time.monotonic(), pid, tuple(node))

    def over(self, limit_s: float) -> dict[str, tuple[int, tuple[str, str]]]:
        """The jobs that started more than `limit_s` ago, each reported once: {name: (pid, node)}."""
        now = time.monotonic()
        late = {name: (pid, node) for name, (t, pid, node) in self.started.items() if now - t > limit_s}
        for name in late:
            del self.started[name]
        return late


def infeasible(cpus: int, gpus: int, nodes: list[dict[str, float]]) -> str | None:
    """Why no node (each its resource totals, as ray.nodes() gives them) can run a task of `cpus` CPUs
    and `gpus` GPUs, in words naming the request and what there is; None if one can."""
    if any(node.get("CPU", 0) >= cpus and node.get("GPU", 0) >= gpus for node in nodes):
        return None
    shapes: dict[str, int] = {}
    for node in nodes:
        shape = f"{node.get('CPU', 0):g} CPUs" + (f" + {node['GPU']:g} GPUs" if node.get("GPU") else "")
        shapes[shape] = shapes.get(shape, 0) + 1
    there = ", ".join(f"{n} x {shape}" if n > 1 else shape for shape, n in sorted(shapes.items())) or "none"
    ask = f"{cpus} CPUs" + (f" and {gpus} GPU" if gpus else "")
    return (f"--cpus-per-task {cpus}{' (with the GPU of a cuda job)' if gpus else ''}: no node of this Ray has "
            f"{ask} ({len(nodes)} node{'s' if len(nodes) != 1 else ''}: {there}); the tasks would wait forever")


def _token_auth_on() -> bool:
    """Whether this driver speaks Ray's token authentication (Ray 2.60 turns it on for a new local cluster)."""
    from ray._raylet import AuthenticationMode, get_authentication_mode

    return get_authentication_mode() == AuthenticationMode.TOKEN


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


def _read_input(path: str) -> bytes | str:
    """The bytes of a job's input file, or why it cannot be read (the job becomes that error row)."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"


def _stage_code(folder: Path) -> Path:
    """A copy of what a task imports or reads besides its inputs -- the `app` and `engine` packages and the
    real targets' meshes (`assets/`, beside them as in a checkout or the wheel) -- in `folder`: the
    working_dir that Ray ships to every node."""
    import app
    import engine
    from app.scenes.fit_settings import ASSETS

    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for source in (Path(app.__file__).parent, Path(engine.__file__).parent, ASSETS):
        shutil.copytree(source, folder / source.name, ignore=skip)
    return folder


def _decode_address(hex_ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address of /proc/net/tcp{,6}: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_ip)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    return getattr(address, "ipv4_mapped", None) or address


def listening(pids: list[int]) -> list[dict]:
    """The TCP ports these processes listen on, from /proc (Linux; [] elsewhere): [{"process", "pid",
    "address", "port", "reach"}], reach being "every interface", "loopback" or "this address"."""
    sockets: dict[str, tuple[str, int, str]] = {}  # socket inode -> (address, port, reach)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                hex_ip, hex_port = fields[1].split(":")
                address = _decode_address(hex_ip)
                reach = ("every interface" if address.is_unspecified else "loopback" if address.is_loopback
                         else "this address")
                sockets[fields[9]] = (str(address), int(hex_port, 16), reach)
    found = []
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed meanwhile (listdir's own, in this process)
                continue
            if link.startswith("socket:[") and link[8:-1] in sockets:
                address, port, reach = sockets[link[8:-1]]
                found.append({"process": name, "pid": pid, "address": address, "port": port, "reach": reach})
    return sorted(found, key=lambda entry: (entry["reach"], entry["process"], entry["port"]))


def _loopback_node_available() -> bool:
    """Whether this machine routes LOOPBACK_NODE (Linux routes all of 127/8; macOS only 127.0.0.1)."""
    try:
        with socket.socket() as probe:
            probe.bind((LOOPBACK_NODE, 0))
        return True
    except OSError:
        return False


class _RayOutput:
    """File descriptors 1 and 2 pointed at `path` (appended to) while Ray runs; `console`: the original stderr.

    At `close` the descriptors are restored, and a run after which nothing but our header line was
    written leaves the file as it found it (absent, or its earlier runs' lines)."""

    def __init__(self, path: Path | None):
        self.path = path
        existed = path is not None and path.exists()
        self._file = open(path, "a+b") if path is not None else tempfile.TemporaryFile()
        self._start = self._file.seek(0, os.SEEK_END)
        self._created = path is not None and not existed
        self._file.write(f"--- Ray's output in batch pid {os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n"
                         .encode())
        self._file.flush()
        self._body = self._file.tell()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self._saved = {fd: os.dup(fd) for fd in (1, 2)}
        for fd in (1, 2):
            os.dup2(self._file.fileno(), fd)
        self.console: TextIO = open(os.dup(self._saved[2]), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                                    errors="replace")
        self.lines = 0

    def written(self) -> bool:
        return os.fstat(self._file.fileno()).st_size > self._body

    def has(self, text: bytes) -> bool:
        """Whether Ray wrote `text` since this session began (looked for in its first MiB)."""
        return text in os.pread(self._file.fileno(), 1 << 20, self._body)

    def close(self) -> None:
        for stream in (sys.stdout, sys.stderr):  # what Ray's Python threads printed belongs to the file
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        self.console.close()
        written = self.written()
        self._file.seek(self._body)
        self.lines = sum(chunk.count(b"\n") for chunk in iter(lambda: self._file.read(1 << 20), b""))
        if not written:
            self._file.truncate(self._start)
        self._file.close()
        if not written and self._created:
            self.path.unlink()


def task_options(job: Job, cluster_gpus: float, retries: int) -> dict:
    """Ray options of a job's task: its CPUs, one GPU when its backend is cuda (or auto) and the cluster
    has GPUs, retries for a dead worker (a failed job is a row, never an exception to retry)."""
    on_gpu = job.arch in ("cuda", "auto") and cluster_gpus > 0
    return {"num_cpus": job.threads, "num_gpus": 1 if on_gpu else 0, "max_retries": retries,
            "retry_exceptions": False, "name": f"batch {job.kind} {job.name}"}


class RaySession:
    """A connection to Ray for one batch (see the module docstring)."""

    def __init__(self, address: str | None = None, cpus: int | None = None, connect_timeout: float = 60.0,
                 log: Path | None = None):
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.cpus = cpus
        self.connect_timeout = connect_timeout
        self.log = log  # where Ray's own output goes while the session is up (None: nowhere)
        self.marker = ""
        self.temp_dir = ""
        self.started_s = 0.0
        self.leftovers: list[int] = []  # processes the embedded session left that we ended
        self.ports: list[dict] = []  # what the session's processes listened on (`listening`), before shutdown
        self.token_auth = False
        self.log_lines = 0  # lines Ray wrote into `log` in this session
        self.console: TextIO = sys.stderr  # this batch's own lines while the session is up
        self._output: _RayOutput | None = None
        self._tmpdir: str | None = None  # TMPDIR before the embedded session set its own
        self._code: str | None = None  # the staged copy of our code a cluster's tasks run

    @property
    def mode(self) -> str:
        return "cluster" if self.address else "embedded"

    def __enter__(self) -> "RaySession":
        started = time.perf_counter()
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        self._output = _RayOutput(self.log)
        self.console = self._output.console
        try:
            self._join() if self.address else self._start()
            self.token_auth = _token_auth_on()
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
        # ray.init retries for minutes, its C++ core logging every retry into Ray's output: a watcher gives
        # up with one line on a refused token or after connect_timeout.
        self._code = tempfile.mkdtemp(prefix="shannon-code-")
        connected = threading.Event()
        threading.Thread(target=self._watch, args=(connected,), daemon=True).start()
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR,
                     runtime_env={"working_dir": str(_stage_code(Path(self._code)))})
        except ConnectionError as exc:
            raise UserError(f"--address {self.address}: {str(exc).strip().splitlines()[0]}") from None
        finally:
            connected.set()

    def _watch(self, connected: threading.Event) -> None:
        deadline = time.monotonic() + self.connect_timeout
        while not connected.wait(0.2):
            refused = self._output.has(b"InvalidAuthToken")
            if refused or time.monotonic() > deadline:
                reason = ("the cluster refused this command's token: set RAY_AUTH_MODE=token and the cluster's "
                          "RAY_AUTH_TOKEN" if refused else
                          f"Ray did not connect within {self.connect_timeout:g} s (is a Ray head listening there?)")
                # Written to the console while fds 1 and 2 stay on Ray's output: its core may log again before _exit.
                os.write(self.console.fileno(), f"error: --address {self.address}: {reason}\n".encode())
                shutil.rmtree(self._code, ignore_errors=True)  # _exit skips __exit__
                os._exit(2)  # ray.init cannot be interrupted from another thread; nothing else local was started

    def _start(self) -> None:
        self.marker = secrets.token_hex(8)
        os.environ[MARKER_ENV] = self.marker
        if not os.environ.get("RAY_AUTH_TOKEN_PATH"):
            os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))  # Ray would write one into ~/.ray
        self.temp_dir = tempfile.mkdtemp(prefix="shannon-ray-")  # short: Ray's socket paths must fit 107 bytes
        self._tmpdir = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = self.temp_dir  # the workers' job folders too: a killed worker's go with the session
        os.environ.setdefault(WORKER_NICENESS_ENV, "0")  # the user's own setting wins (see the module docstring)
        node = {"_node_ip_address": LOOPBACK_NODE} if _loopback_node_available() else {}
        with signals_ignored():  # inherited by Ray's processes (see the module docstring)
            ray.init(address="local", num_cpus=self.cpus, include_dashboard=False, _temp_dir=self.temp_dir,
                     log_to_driver=False, logging_level=logging.ERROR, **node)

    def __exit__(self, *exc_info) -> None:
        with signals_ignored():  # a second Ctrl-C must not stop the clean-up
            if ray.is_initialized():
                self.ports = listening([os.getpid(), *(_marked_pids(self.marker) if self.marker else [])])
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
            if self._code:
                shutil.rmtree(self._code, ignore_errors=True)
            if self._output is not None:
                self._output.close()
                self.log_lines, self.console, self._output = self._output.lines, sys.stderr, None

    def exposure(self) -> str:
        """One line on where Ray listened (`ports`) and whether a token guards it; "" when nothing was measured."""
        if not self.ports:
            return ""
        every = [port for port in self.ports if port["reach"] == "every interface"]
        names: dict[str, int] = {}
        for port in every:
            name = "this command" if port["pid"] == os.getpid() else port["process"]
            names[name] = names.get(name, 0) + 1
        parts = [f"{len(every)} on every interface ({', '.join(f'{n} x{k}' if k > 1 else n for n, k in names.items())}"
                 f"; Ray 2.60 cannot bind them to loopback)"] if every else []
        for reach in ("loopback", "this address"):
            ports = [port for port in self.ports if port["reach"] == reach]
            if ports:
                parts.append(f"{len(ports)} on {', '.join(sorted({port['address'] for port in ports}))}")
        guard = "token authentication on" if self.token_auth else "NO token authentication (set RAY_AUTH_MODE=token)"
        return (f"Ray's ports{'' if self.mode == 'embedded' else ' here'}: {', '.join(parts)}; {guard}"
                + ("" if self.mode == "embedded" else " (the cluster's nodes are not seen from here)"))

    def check_feasible(self, job: Job, retries: int) -> None:
        """Refuse (UserError) a batch whose tasks, asking what `job` asks, no live node can run."""
        options = task_options(job, self.resources()["GPU"], retries)
        nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
        reason = infeasible(options["num_cpus"], options["num_gpus"], nodes)
        if reason:
            raise UserError(reason)

    def resources(self) -> dict[str, float]:
        """The cluster's totals: {"CPU": ..., "GPU": ..., "nodes": ...}."""
        total = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        return {"CPU": total.get("CPU", 0.0), "GPU": total.get("GPU", 0.0), "nodes": nodes}

    def run(self, jobs: list[Job], on_result: Callable[[Job, dict], None], retries: int = 2,
            on_wait: Callable[[int], None] | None = None, job_timeout: float | None = None) -> None:
        """Run every job as a task; call `on_result(job, result)` as each finishes (in this thread) and
        `on_wait(in_flight)` twice a second. A job running longer than `job_timeout` seconds is killed
        and comes back as a timed_out row. Ctrl-C or SIGTERM (`Interrupted`) cancels the tasks left and passes on."""
        gpus = self.resources()["GPU"]
        tasks = {False: ray.remote(max_calls=MAX_CALLS)(_task), True: ray.remote(_task)}  # GPU: Ray's one job per process
        clock = ray.remote(num_cpus=0, max_restarts=0)(_Clock).remote() if job_timeout else None
        files = {path for job in jobs if (path := input_file(job))}
        shipped = {path: ray.put(_read_input(path)) for path in sorted(files)}  # once per file, whatever its jobs
        pending, by_name, timed_out = {}, {}, {}
        for job in jobs:
            options = task_options(job, gpus, retries)
            ref = tasks[options["num_gpus"] > 0].options(**options).remote(job, clock, shipped.get(input_file(job)))
            pending[ref], by_name[job.name] = job, ref
        # A signal only raises a flag here: an exception raised by a handler while Ray's C++ code waits
        # comes out as a SystemError; the loop looks at the flag every half second instead.
        with graceful_stop() as stop:
            try:
                while pending and not stop:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                    for ref in ready:
                        job = pending.pop(ref)
                        on_result(job, self._result(job, ref, timed_out.get(job.name), job_timeout))
                    if clock is not None:
                        self._stop_late(clock, job_timeout, pending, by_name, timed_out)
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
    def _stop_late(clock, job_timeout: float, pending: dict, by_name: dict, timed_out: dict) -> None:
        """Cancel (kill the worker of) every pending job the clock says is past `job_timeout`."""
        try:
            late = ray.get(clock.over.remote(job_timeout), timeout=10)
        except ray.exceptions.RayError:  # the clock is slow or gone: no job is stopped this time round
            return
        for name, where in late.items():
            ref = by_name.get(name)
            if ref in pending and name not in timed_out:
                timed_out[name] = where
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # it finished meanwhile: its result is kept
                    pass

    @staticmethod
    def _result(job: Job, ref, killed: tuple[int, tuple[str, str]] | None = None,
                job_timeout: float | None = None) -> dict:
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:  # the task's worker died more often than max_retries, a node was lost
            if killed is not None:  # we stopped it: past --job-timeout
                pid, (node, node_id) = killed
                return {"row": {"job": job.name, "status": "timed_out", "pid": pid, "backend": "", "node": node,
                                "node_id": node_id,
                                "error": f"stopped after --job-timeout {job_timeout:g} s (its worker, pid {pid}, "
                                         f"was killed)"}, "files": {}, "log": ""}
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return {"row": {"job": job.name, "status": "error", "error": f"Ray: {type(exc).__name__}: {reason}",
                            "pid": "", "backend": "", "node": "", "node_id": ""}, "files": {}, "log": str(exc)}
