"""Shared fixtures: backend workers (one process per arch) and the in-process cpu backend.

pytest runs in one process, which can hold one Taichi arch; tests that need another
arch talk to a `BackendWorker`. Without a GPU, CUDA tests skip and say why. In CI
(CI=true) a missing Vulkan is a failure, not a skip.
"""
from __future__ import annotations

import os

import pytest

from engine import backend
from engine.worker import BackendWorker, WorkerError

IN_CI = os.environ.get("CI", "").lower() == "true"
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


def pytest_sessionfinish(session, exitstatus) -> None:
    for worker in _workers.values():
        worker.close()
