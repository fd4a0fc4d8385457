"""Backend selection: explicit failures are one line and exit 2; auto says why it fell back."""
import subprocess
import sys

import pytest

from engine import backend
from engine.errors import UserError


def run_app(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_unknown_arch_is_one_line_exit_2():
    result = run_app("--headless", "--arch", "nonsense")
    assert result.returncode == 2
    assert error_lines(result) == ["error: unknown backend 'nonsense' (from --arch): choose one of auto, cuda, vulkan, cpu"]
    assert "Traceback" not in result.stderr


def test_unknown_arch_from_environment_names_the_variable():
    result = run_app("--headless", env={"SHANNON_ARCH": "metal"})
    assert result.returncode == 2
    assert "SHANNON_ARCH" in result.stderr and "'metal'" in result.stderr


def test_requested_arch_precedence(monkeypatch):
    monkeypatch.setenv("SHANNON_ARCH", "vulkan")
    assert backend.requested_arch(None) == "vulkan"
    assert backend.requested_arch("cpu") == "cpu"
    monkeypatch.delenv("SHANNON_ARCH")
    assert backend.requested_arch(None) == "auto"
    with pytest.raises(UserError):
        backend.requested_arch("gpu")


@pytest.mark.skipif(backend.cuda_unavailable_reason() is None, reason="a GPU is present: cuda does start here")
def test_explicit_cuda_without_gpu_is_a_hard_error():
    result = run_app("--headless", "--arch", "cuda")
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith("error: backend cuda is not available:")
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(backend.cuda_unavailable_reason() is None, reason="a GPU is present: auto picks cuda")
def test_auto_falls_back_to_cpu_and_says_why():
    code = "from engine import backend; print(backend.init('auto').name)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert result.stdout.strip().splitlines()[-1] == "cpu"
    reason = backend.cuda_unavailable_reason()
    assert f"auto: no CUDA ({reason}); running on cpu" in result.stderr


def test_ti_arch_override_is_caught():
    """TI_ARCH silently overrides Taichi's arch argument; we must refuse to run the wrong backend."""
    result = run_app("--headless", "--only", "affine", "--arch", "cpu", env={"TI_ARCH": "vulkan"})
    assert result.returncode == 2
    assert error_lines(result) == ["error: TI_ARCH=vulkan is set in the environment: Taichi would let it override the "
                                   "backend asked for; unset it and use --arch or SHANNON_ARCH"]


ENGINE_BEFORE_INIT = """
import numpy as np
from engine.backend import BackendNotStarted
from engine.meshgen import icosphere

def refused(make):
    try:
        make()
    except BackendNotStarted as exc:
        return str(exc)
    return "no error"

from engine.triangle_bvh import TriangleBVH
from engine.render import Renderer
from app.scenes.shape_fit import ShapeFit
vertices, faces = icosphere(1)
print(refused(lambda: TriangleBVH.build(vertices, faces)))
print(refused(lambda: Renderer(16, 8)))
print(refused(lambda: ShapeFit("blob", subdiv=1)))
from engine import backend
backend.init("cpu")
print(type(TriangleBVH.build(vertices, faces)).__name__)
"""


def test_engine_before_a_backend_is_one_clear_error():
    # the README's snippets once died in Taichi's C++ (snode_registry: prog != nullptr) or with
    # "forgot to call ti.init()" when they did not start a backend first
    result = subprocess.run([sys.executable, "-c", ENGINE_BEFORE_INIT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [backend.NOT_STARTED] * 3 and "engine.backend.init('cpu')" in lines[0]
    assert lines[3] == "TriangleBVH"  # and once one runs, the same call works
