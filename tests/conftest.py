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
