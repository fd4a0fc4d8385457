"""Taichi's CPU thread pool, one worker per core: find the pool's threads and pin each to a core.

Why: on the 2-core machines we measure on (and CI's), Linux often queues both pool workers on
the core of the thread that woke them, and a launch of a few milliseconds or less ends before
load balancing moves one: the parallel loop then runs on one core (busy 1.0), in some
processes and not in others. With worker k pinned to allowed core k every launch uses every
core: the 20k-triangle BVH refit 0.28-0.47 ms -> 0.25, the 254k one 2.6-4.8 -> 2.6 ms, from
one process to the next (docs/RESULTS.md, issue 12).

`pin_workers(before)` runs right after `ti.init` on the cpu (`engine.backend`). The workers are
the threads that appeared during `ti.init` (not in `before`) and that run when a parallel
kernel is launched (their run time in /proc/self/task/<tid>/schedstat grows). They are pinned
only where that finds exactly one worker per core this process may use (Taichi's default,
`cpu_max_num_threads` = the machine's cores, in a process allowed every core), on Linux, and
unless SHANNON_PIN_THREADS=0 (for a machine shared with other busy work, where a pinned worker
cannot move away from a loaded core). Otherwise nothing changes, and `pinned()` is empty.
"""
from __future__ import annotations

import logging
import os
import sys
import threading

import numpy as np

log = logging.getLogger(__name__)
PIN_ENV = "SHANNON_PIN_THREADS"
WAKES = 3  # launches that must each find the workers awake
_pinned: dict[int, int] = {}  # worker thread id -> its core, in the running Taichi program


def thread_ids() -> set[int]:
    """This process's threads (Linux; empty elsewhere)."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _run_ns(tid: int) -> int:
    """Nanoseconds thread `tid` has run so far (-1 once it has exited)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as stat:
            return int(stat.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def pin_workers(before: set[int]) -> dict[int, int]:
    """Pin the pool's workers started since `before` (a `thread_ids()` taken before `ti.init`)
    one per allowed core, where the module docstring's conditions hold; returns `pinned()`."""
    import taichi as ti

    from engine import taichi_private
    from engine.kernels.thread_pool import wake_workers
    from engine.launch import launch

    _pinned.clear()
    if os.environ.get(PIN_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return {}
    cores = sorted(os.sched_getaffinity(0))
    width = taichi_private.cpu_threads()
    if width < 2 or width != len(cores):
        log.debug("CPU pool of %d workers on %d allowed cores: not pinned", width, len(cores))
        return {}
    candidates = thread_ids() - before - {t.native_id for t in threading.enumerate()}  # Python's threads: not the pool's
    blocks = np.zeros(64 * width, np.int32)
    launch(wake_workers, blocks)  # compiled (or loaded) first: compiler threads must not count as workers
    ti.sync()
    ran = {tid: _run_ns(tid) for tid in candidates}
    for _ in range(WAKES):
        launch(wake_workers, blocks)
        ti.sync()
    workers = sorted(tid for tid in candidates if _run_ns(tid) > ran[tid] >= 0)
    if len(workers) != width:
        log.debug("found %d running pool threads for %d workers: not pinned", len(workers), width)
        return {}
    for core, tid in zip(cores, workers):
        os.sched_setaffinity(tid, {core})
    _pinned.update(zip(workers, cores))
    log.debug("CPU pool workers pinned: %s", _pinned)
    return pinned()


def on_cpu() -> bool:
    """Whether the running Taichi program is on the CPU backend."""
    import taichi as ti

    from engine import taichi_private

    return taichi_private.arch() in (ti.x64, ti.arm64)


def loop_spread(blocks: int) -> tuple[int, int, int]:
    """(span, chunk, threads) for a parallel loop over `blocks` blocks spread over the running
    backend's threads by `engine.kernels.spread.spread_block` (its docstring says why): on the
    CPU one chunk of at least CPU_MIN_CHUNK iterations per pool thread, elsewhere one block an
    iteration."""
    from engine import taichi_private
    from engine.kernels.spread import CPU_MIN_CHUNK

    if not on_cpu():
        return blocks, blocks, 1
    threads = taichi_private.cpu_threads()
    chunk = max(-(-blocks // threads), CPU_MIN_CHUNK)
    return threads * chunk, chunk, threads


def pinned() -> dict[int, int]:
    """Worker thread id -> core, for the running program's pool (empty when not pinned)."""
    return dict(_pinned)
