"""Shared fixtures: backend workers (one process per arch) and the in-process cpu backend.

pytest runs in one process, which can hold one Taichi arch; tests that need another
arch talk to a `BackendWorker`. Without a GPU, CUDA tests skip and say why. In CI
(CI=true) a missing Vulkan is a failure, not a skip.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import backend
from engine.worker import BackendWorker, WorkerError

IN_CI = os.environ.get("CI", "").lower() == "true"
ROOT = Path(__file__).resolve().parents[1]
_workers: dict[str, BackendWorker] = {}


def backend_worker(arch: str) -> BackendWorker:
    """A worker for `arch` shared by the whole session; skips (or fails in CI) if unavailable."""
    worker = _workers.get(arch)
    if worker is not None and worker.alive:
        return worker
    if arch == "cuda":
        reason = backend.cuda_unavailable_reason()
        if reason:
            pytest.skip(f"CUDA tests need an NVIDIA GPU: {reason}")
    try:
        _workers[arch] = BackendWorker(arch)
    except WorkerError as exc:
        if IN_CI and arch != "cuda":
            pytest.fail(f"{arch} must be available in CI: {exc}")
        pytest.skip(f"{arch} unavailable: {exc}")
    return _workers[arch]


def fresh_worker(arch: str) -> BackendWorker:
    """A worker for `arch` of the current test module's own: started on first use, closed after the module.

    Taichi reads its offline cache's index once per process, at the first kernel it looks up, and never
    again: the session's workers (`backend_worker`), busy since the first tests, compile every kernel that
    other processes have put into the cache since (the ray-march kernel on lavapipe: most of a minute). A
    fresh worker finds them. Its first fields are its module's first, too: kernels that take fields are
    cached by their SNode ids, so they load only in a process that allocated the same fields first (the
    differentiable renderer's, as `invert` and the app's workers do)."""
    backend_worker(arch)  # skips (or fails in CI) as the suite does when the arch is missing
    worker = _fresh_workers.get(arch)
    if worker is None or not worker.alive:
        worker = _fresh_workers[arch] = BackendWorker(arch)
    return worker


_fresh_workers: dict[str, BackendWorker] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_fresh_workers():
    yield
    for worker in _fresh_workers.values():
        worker.close()
    _fresh_workers.clear()


CUDA = pytest.param("cuda", marks=pytest.mark.cuda)  # an arch parameter: runs with `-m cuda`, skips without a GPU
OTHER_ARCHS = ["vulkan", CUDA]  # the backends a test in the cpu process compares itself against


@pytest.fixture(params=["cpu", "vulkan", CUDA])
def worker(request) -> BackendWorker:
    """A worker on each backend in turn."""
    return backend_worker(request.param)


@pytest.fixture(scope="session")
def ti_cpu() -> backend.Backend:
    """Taichi on the cpu in the test process itself."""
    return backend.init("cpu")


# Modules whose processes put the shared differentiable renderer's fields first and load its kernels from the cache.
RENDERER_MODULES = {"test_diff_render.py", "test_drjit_port.py", "test_examples.py", "test_gui.py", "test_invert.py"}
_warming: dict[str, subprocess.Popen] = {}


def needs_renderer_warm_up(items) -> bool:
    """Whether a selected test uses the renderer on cpu or vulkan: a cuda-marked test (`-m cuda`, gpu_check.sh's
    test step) does not, and must not wait on a warm-up at the lowest priority that a loaded machine starves."""
    return any(item.path.name in RENDERER_MODULES and item.get_closest_marker("cuda") is None for item in items)


def pytest_collection_finish(session) -> None:
    """When tests that use the differentiable renderer are selected, compile it on cpu and vulkan in the background
    (`tests.warm_renderer`, at the lowest priority, below Ray's workers (nice 15): it takes the core the first tests
    leave idle)."""
    if not needs_renderer_warm_up(session.items):
        return
    for arch in ("cpu", "vulkan"):
        _warming[arch] = subprocess.Popen([sys.executable, "-m", "tests.warm_renderer", arch], cwd=ROOT,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=lambda: os.nice(19))


@pytest.fixture(scope="module", autouse=True)
def _renderer_compiled_first(request):
    """In the modules that use the renderer, wait for its background compile first (it is written to the cache
    when it ends), so that their processes load the kernels instead of compiling them a second time."""
    if request.path.name in RENDERER_MODULES:
        for arch in list(_warming):
            _warming.pop(arch).wait()


def pytest_sessionfinish(session, exitstatus) -> None:
    for process in _warming.values():  # a run that ended early (-x, Ctrl-C) before the compile did
        process.kill()
        process.wait()
    for worker in _workers.values():
        worker.close()
