"""Backend selection: which Taichi arch runs in this process, and why.

`init("auto" | "cuda" | "vulkan" | "cpu")` starts Taichi and returns the `Backend`
that actually runs. Rules:

- `auto` prefers CUDA; when it cannot have it, it prints one line saying why and
  runs on the CPU.
- An explicitly requested backend that cannot start raises `UserError` (one line,
  exit code 2). Taichi's own silent fallback (cuda -> cpu with a warning) is disabled
  and, in case `TI_ARCH` overrides us, the arch in use is checked after start-up.
- `fast_math` is off: it lets the code generators substitute approximate `sqrt`,
  `rsqrt` and division, and each backend substitutes differently, which alone breaks
  1e-4 pixel parity between LLVM (cpu/cuda) and SPIR-V (vulkan). Exact IEEE
  operations cost us little in measured time and make the backends comparable.

Taichi holds one arch per process; compare backends with `engine.worker`.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
from dataclasses import dataclass

from engine.errors import UserError

ARCH_ENV = "SHANNON_ARCH"
ARCH_CHOICES = ("auto", "cuda", "vulkan", "cpu")


@dataclass(frozen=True)
class Backend:
    name: str  # the arch that actually runs: "cuda", "vulkan" or "cpu"
    requested: str  # what was asked for: one of ARCH_CHOICES
    note: str = ""  # why `auto` did not get CUDA, else ""

    @property
    def has_f64(self) -> bool:
        return True  # all three run f64 (lavapipe included); kept as a property for the record

    def as_record(self) -> dict:
        return {"arch": self.name, "requested": self.requested, "note": self.note}


_current: Backend | None = None
_profiling = False  # whether the running backend was started with Taichi's kernel profiler


def requested_arch(value: str | None = None) -> str:
    """The arch asked for: the flag if given, else $SHANNON_ARCH, else `auto`."""
    source = "--arch" if value else ARCH_ENV
    value = value or os.environ.get(ARCH_ENV) or "auto"
    if value not in ARCH_CHOICES:
        raise UserError(f"unknown backend '{value}' (from {source}): choose one of {', '.join(ARCH_CHOICES)}")
    return value


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


def _arch_in_use() -> str:
    import taichi as ti

    arch = ti.lang.impl.current_cfg().arch
    return {ti.x64: "cpu", ti.arm64: "cpu", ti.cuda: "cuda", ti.vulkan: "vulkan"}.get(arch, str(arch))


def _start(name: str, kernel_profiler: bool) -> None:
    import taichi as ti

    arch = {"cuda": ti.cuda, "vulkan": ti.vulkan, "cpu": ti.cpu}[name]
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Taichi's "Starting on arch=" line; we report our own
            ti.init(arch=arch, enable_fallback=False, fast_math=False, offline_cache=True, verbose=False,
                    kernel_profiler=kernel_profiler)
    except Exception as exc:  # Taichi raises RuntimeError or its own types; the message is what matters
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = " (install mesa-vulkan-drivers for lavapipe)" if name == "vulkan" else ""
        raise UserError(f"backend {name} is not available: {reason}{hint}") from None


def init(arch: str | None = None, kernel_profiler: bool = False) -> Backend:
    """Start Taichi on the requested arch (see module docstring) and return what runs.

    `kernel_profiler` switches on Taichi's per-kernel timing (it can only be chosen at start-up).
    """
    global _current, _profiling
    requested = requested_arch(arch)
    name, note = requested, ""
    if requested == "auto":
        reason = cuda_unavailable_reason()
        name = "cuda" if reason is None else "cpu"
        if reason:
            note = f"auto: no CUDA ({reason}); running on cpu"
            print(note, file=sys.stderr)
    elif requested == "cuda":
        reason = cuda_unavailable_reason()
        if reason:
            raise UserError(f"backend cuda is not available: {reason}")
    if _current is not None and _current.name == name and _profiling == kernel_profiler:
        return _current
    _start(name, kernel_profiler)
    _profiling = kernel_profiler
    actual = _arch_in_use()
    if actual != name:
        raise UserError(f"backend {name} was requested but Taichi started {actual} (is TI_ARCH set?)")
    _current = Backend(name=name, requested=requested, note=note)
    return _current


def current() -> Backend:
    """The backend started by `init`; raises if none was started in this process."""
    if _current is None:
        raise RuntimeError("no backend started: call engine.backend.init(arch) first")
    return _current


def stop() -> Backend | None:
    """Stop Taichi in this process (`ti.reset`) and return the backend that ran, if any.

    Every field is freed and Taichi writes its offline kernel cache now, not at interpreter exit
    (which a process ended by `os._exit`, such as a Ray worker, never reaches). The next `init`
    starts a fresh program whose SNode ids start from 0 again, so kernels specialised on the next
    job's fields are the cached ones (see app/batch/execute.py for what that saves)."""
    global _current
    stopped, _current = _current, None
    if stopped is not None:
        import taichi as ti

        ti.reset()
    return stopped
