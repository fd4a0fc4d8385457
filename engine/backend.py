"""Backend selection: which Taichi arch runs in this process, and why.

`init("auto" | "cuda" | "vulkan" | "cpu")` starts Taichi and returns the `Backend`
that actually runs. Rules:

- `auto` prefers CUDA; when it cannot have it, it runs on the CPU and says why in the
  `Backend`'s `note` (the `backend` record of report.json, fit.json, ...) and in one debug
  line (`-v`): a machine without a GPU is normal, not a warning for every command. An
  explicit arch has no note.
- An explicitly requested backend that cannot start raises `UserError` (one line,
  exit code 2). Taichi's own silent fallback (cuda -> cpu with a warning) is disabled;
  `TI_ARCH` in the environment (Taichi lets it override the arch asked for) is refused
  before anything starts, and the arch in use is checked after start-up all the same.
- `fast_math` is off: it lets the code generators substitute approximate `sqrt`,
  `rsqrt` and division, and each backend substitutes differently, which alone breaks
  1e-4 pixel parity between LLVM (cpu/cuda) and SPIR-V (vulkan). Exact IEEE
  operations cost us little in measured time and make the backends comparable.

Taichi holds one arch per process; compare backends with `engine.worker`.

Everything that allocates on the device (`engine.fields.FieldGroup`, and through it BVHs, fits
and optimisers; `engine.render.Renderer`) first calls `require()`, so that using the engine
before a backend is started is one `BackendNotStarted` error that says what to call, not
Taichi's C++ assertion or its "forgot to call ti.init()".
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError

log = logging.getLogger(__name__)
ARCH_ENV = "SHANNON_ARCH"
TI_ARCH_ENV = "TI_ARCH"  # Taichi's own override, refused (see requested_arch)
ARCH_CHOICES = ("auto", "cuda", "vulkan", "cpu")


@dataclass(frozen=True)
class Backend:
    name: str  # the arch that actually runs: "cuda", "vulkan" or "cpu"
    requested: str  # what was asked for: one of ARCH_CHOICES
    note: str = ""  # why `auto` did not get CUDA ("auto: no CUDA (REASON); running on cpu"), else ""

    def as_record(self) -> dict:
        return {"arch": self.name, "requested": self.requested, "note": self.note}


class BackendNotStarted(RuntimeError):
    """The engine was used before any Taichi backend was started in this process."""


NOT_STARTED = ("no Taichi backend is running in this process: call engine.backend.init('cpu') "
               "(or 'auto', 'cuda', 'vulkan') before making fields, BVHs, fits or renderers")

_current: Backend | None = None
_profiling = False  # whether the running backend was started with Taichi's kernel profiler
_stops_at_exit = False  # whether `_stop_at_exit` is registered


def requested_arch(value: str | None = None, flag: str = "--arch") -> str:
    """The arch asked for: the flag (named `flag` in errors) if given, else $SHANNON_ARCH, else `auto`.

    `TI_ARCH` in the environment is refused: Taichi lets it override the arch we ask for."""
    source = flag if value else ARCH_ENV
    value = value or os.environ.get(ARCH_ENV) or "auto"
    if value not in ARCH_CHOICES:
        raise UserError(f"unknown backend '{value}' (from {source}): choose one of {', '.join(ARCH_CHOICES)}")
    if os.environ.get(TI_ARCH_ENV):
        raise UserError(f"{TI_ARCH_ENV}={os.environ[TI_ARCH_ENV]} is set in the environment: Taichi would let it "
                        f"override the backend asked for; unset it and use --arch or {ARCH_ENV}")
    return value


def check_requested(arch: str | None = None) -> str:
    """`requested_arch`, and an explicit cuda refused on a machine without a GPU: what `init` checks before starting.

    Commands call it while they check their flags, so that a backend that cannot start costs nothing."""
    requested = requested_arch(arch)
    if requested == "cuda" and (reason := cuda_unavailable_reason()):
        raise UserError(f"backend cuda is not available: {reason}")
    return requested


def cuda_unavailable_reason() -> str | None:
    """Why CUDA cannot run here, in a few words, or None if a CUDA device answers."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "libcuda.so not found (no NVIDIA driver)"
    if libcuda.cuInit(0) != 0:
        return "the NVIDIA driver failed to initialise (cuInit)"
    count = ctypes.c_int(0)
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device found"
    return None


def arch_in_use() -> str:
    """The arch Taichi runs in this process ("cpu", "cuda", "vulkan"); requires a started backend."""
    import taichi as ti

    from engine import taichi_private

    arch = taichi_private.arch()
    return {ti.x64: "cpu", ti.arm64: "cpu", ti.cuda: "cuda", ti.vulkan: "vulkan"}.get(arch, str(arch))


# Taichi evicts its kernel cache oldest-first past 100 MiB by default; the taped render, BVH, fit and
# launch kernels of one checkout already fill that, so every run recompiled (minutes on 2 cores).
OFFLINE_CACHE_BYTES = 1 << 30


# Taichi holds its cache locks for the moment it reads or writes the cache's index; one older than this was
# left by a process killed meanwhile, and while it exists every later process compiles without the cache.
STALE_LOCK_S = 120.0


def clear_stale_cache_locks(cache_dir: str | Path, now: float | None = None) -> list[Path]:
    """Remove the `*.lock` files under Taichi's kernel cache `cache_dir` older than STALE_LOCK_S; return them.

    Taichi takes a lock file beside the cache's index for each read and write and gives up after a
    fraction of a second, warning "Lock ... failed" and compiling everything again; a process killed
    while it held the lock leaves the file behind, so from then on no process used the cache (a 19 s
    test took 231 s) until someone removed it (tests/test_backend.py checks Taichi still behaves so).

        >>> clear_stale_cache_locks("/nonexistent/ticache")
        []
    """
    now = time.time() if now is None else now
    stale = []
    for lock in Path(cache_dir).glob("**/*.lock"):
        with contextlib.suppress(FileNotFoundError):  # another process may release or clear it meanwhile
            if now - lock.stat().st_mtime > STALE_LOCK_S:
                lock.unlink()
                stale.append(lock)
    return stale


def _start(name: str, kernel_profiler: bool) -> None:
    import taichi as ti

    from engine import compile_effort, kernel_count, kernel_source_info, taichi_private

    kernel_source_info.install()  # halves every kernel's load from the offline cache (its docstring)
    kernel_count.install()  # the k of "compiling kernels (k of n)"
    compile_effort.install()  # big forward kernels compile in seconds (its docstring)
    arch = {"cuda": ti.cuda, "vulkan": ti.vulkan, "cpu": ti.cpu}[name]
    cache_dir = os.environ.get("TI_OFFLINE_CACHE_FILE_PATH") or taichi_private.default_offline_cache_dir()
    for lock in clear_stale_cache_locks(cache_dir):  # the environment overrides the default, as in ti.init
        log.warning("removed a stale Taichi cache lock %s (left by a killed process; without its removal "
                    "every kernel would compile again)", lock)
    from engine import cpu_pool

    # Taichi's start asks the network once a day for a newer release, in a thread: offline it fails and asks
    # again at every start, and while it runs it looked like a third pool worker to `pin_workers` (after midnight
    # UTC, 2026-12-05: no pinning). The user's own setting wins.
    os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
    threads_before = cpu_pool.thread_ids()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Taichi's "Starting on arch=" line; we report our own
            ti.init(arch=arch, enable_fallback=False, fast_math=False, offline_cache=True, verbose=False,
                    offline_cache_max_size_of_files=OFFLINE_CACHE_BYTES, kernel_profiler=kernel_profiler)
    except Exception as exc:  # Taichi raises RuntimeError or its own types; the message is what matters
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = " (install mesa-vulkan-drivers for lavapipe)" if name == "vulkan" else ""
        raise UserError(f"backend {name} is not available: {reason}{hint}") from None
    # Taichi turns the (empty) default field tree into SNode tree 0 at a program's first sync or launch; done
    # here, every process numbers the fields it allocates later the same way whatever it runs first, and the
    # offline cache, keyed by SNode ids, serves a kernel in any of them (the window renders a frame before it
    # allocates the differentiable renderer; the processes that filled the cache allocated it first)
    ti.sync()
    if name == "cpu":
        cpu_pool.pin_workers(threads_before)  # one pool worker per core (engine/cpu_pool.py says why)


def init(arch: str | None = None, kernel_profiler: bool = False) -> Backend:
    """Start Taichi on the requested arch (see module docstring) and return what runs.

    `kernel_profiler` switches on Taichi's per-kernel timing (it can only be chosen at start-up).
    """
    global _current, _profiling, _stops_at_exit
    requested = check_requested(arch)
    name, note = requested, ""
    if requested == "auto":
        reason = cuda_unavailable_reason()
        name = "cuda" if reason is None else "cpu"
        if reason:
            note = f"auto: no CUDA ({reason}); running on cpu"
            log.debug(note)  # -v only; kept in the record (as_record) for report.json
    if _current is not None and _current.name == name and _profiling == kernel_profiler:
        if (_current.requested, _current.note) != (requested, note):  # the record says what this call asked
            _current = Backend(name=name, requested=requested, note=note)
        return _current
    started = time.perf_counter()
    _start(name, kernel_profiler)
    log.debug("backend %s started in %.2f s", name, time.perf_counter() - started)
    _profiling = kernel_profiler
    actual = arch_in_use()
    if actual != name:
        raise UserError(f"backend {name} was requested but Taichi started {actual} (is TI_ARCH set?)")
    _current = Backend(name=name, requested=requested, note=note)
    if not _stops_at_exit:
        atexit.register(_stop_at_exit)
        _stops_at_exit = True
    return _current


def _stop_at_exit() -> None:
    """At interpreter exit (a normal end, an error, SIGINT or SIGTERM: the CLI turns both into a return): `stop()`,
    so that Taichi writes its offline kernel cache. Taichi writes it only when its program is finalized, which at
    exit happened only if nothing referenced the program any more: measured, `python -m app render` and the
    acceptance left their kernels out of the cache, and every run compiled them again (2026-12-05)."""
    try:
        stop()
    except Exception as exc:  # exiting anyway: the next run compiles what this one could not write
        log.warning("could not write Taichi's kernel cache at exit: %s", exc)


def default_parity_arch(arch: str) -> str:
    """The natural second backend: vulkan beside the cpu, else the cpu."""
    return "vulkan" if arch == "cpu" else "cpu"


def resolve_archs(arch: str | None, parity_arch: str | None) -> tuple[str, str]:
    """The requested primary arch and the parity arch (default: the natural partner of the primary).

    Checked before anything starts (UserError naming the flag): names, `TI_ARCH`, and an explicit
    cuda (either flag) on a machine without a GPU. Needs no Taichi: the UI process never imports it.
    """
    requested = requested_arch(arch)
    primary = requested
    if requested == "auto":
        primary = "cuda" if cuda_unavailable_reason() is None else "cpu"
    parity = requested_arch(parity_arch, "--parity-arch") if parity_arch else default_parity_arch(primary)
    if parity == "auto":
        raise UserError("--parity-arch must name a backend (cuda, vulkan or cpu), not auto")
    if "cuda" in (requested, parity) and (reason := cuda_unavailable_reason()):
        flag = "--arch" if requested == "cuda" else "--parity-arch"
        raise UserError(f"backend cuda is not available: {reason} ({flag} cuda)")
    return requested, parity


def require() -> None:
    """Raise `BackendNotStarted` unless Taichi runs in this process (started by `init`, or by `ti.init`).

        >>> from engine import backend
        >>> backend.init("cpu").name
        'cpu'
        >>> backend.require()  # quiet once a backend runs
    """
    from engine import taichi_private

    if taichi_private.program() is None:  # what ti.init creates and ti.reset drops (tests/test_taichi_internals.py)
        raise BackendNotStarted(NOT_STARTED)


def taichi_program() -> object:
    """The running Taichi program, as a key for what is kept between calls (fields, compiled scratch).

    Compare it with `is` and keep the reference: `ti.reset` frees a program's fields, and the next
    program's object can reuse the old one's address, so an `id()` kept as the key matched a new
    program and the kept fields were used after they were freed (a segfault, seen in a process
    running several fits with `stop()` between them)."""
    from engine import taichi_private

    return taichi_private.program()


def stop() -> Backend | None:
    """Stop Taichi in this process (`ti.reset`) and return the backend that ran, if any.

    Every field is freed and Taichi writes its offline kernel cache now, not at interpreter exit
    (which a process ended by `os._exit`, such as a Ray worker, never reaches). The next `init`
    starts a fresh program whose SNode ids start from 0 again, so kernels specialised on the next
    job's fields are the cached ones (see app/batch/execute.py for what that saves)."""
    global _current
    stopped, _current = _current, None
    if stopped is not None:
        import gc

        import taichi as ti

        # Unreachable ndarrays (in reference cycles) are deleted now, by the program that made them: a later
        # collection ran Taichi's Ndarray.__del__ against the next program and crashed (issue 12's branch).
        gc.collect()
        ti.reset()
    return stopped
