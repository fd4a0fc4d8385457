"""Backend selection: explicit failures are one line and exit 2; auto says why it fell back."""
import json
import os
import subprocess
import sys

import pytest

from engine import backend
from engine.errors import UserError
from tests.conftest import OTHER_ARCHS, backend_worker


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


AUTO_AT_EACH_VERBOSITY = """
import json, sys
from app.flags import configure_logging
from engine import backend
for verbosity, arch in ((-1, "auto"), (0, "auto"), (1, "cpu"), (1, "auto")):
    configure_logging(verbosity)
    print(f"--- {verbosity} {arch}", file=sys.stderr, flush=True)
    print(json.dumps(backend.init(arch).as_record()), flush=True)
"""


@pytest.mark.skipif(backend.cuda_unavailable_reason() is None, reason="a GPU is present: auto picks cuda")
def test_auto_falls_back_to_cpu_and_says_why_in_the_record_and_at_v_only():
    """Issue 31: a machine without CUDA is normal; `auto` says why it runs on the cpu in the backend's record
    (report.json) always, on stderr only at -v (a debug line), and an explicit arch says nothing."""
    result = subprocess.run([sys.executable, "-c", AUTO_AT_EACH_VERBOSITY], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    note = f"auto: no CUDA ({backend.cuda_unavailable_reason()}); running on cpu"
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert records == [{"arch": "cpu", "requested": "auto", "note": note}] * 2 + [
        {"arch": "cpu", "requested": "cpu", "note": ""}, {"arch": "cpu", "requested": "auto", "note": note}]
    stderr = {part.split("\n", 1)[0]: part for part in result.stderr.split("--- ")[1:]}
    assert "no CUDA" not in stderr["-1 auto"] + stderr["0 auto"] + stderr["1 cpu"], result.stderr
    assert f"debug: {note}" in stderr["1 auto"].splitlines(), result.stderr


def test_quiet_command_without_cuda_prints_nothing_about_it(tmp_path):
    result = run_app("--headless", "-q", "--only", "affine", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "no CUDA" not in result.stderr, result.stderr
    record = json.loads((tmp_path / "report.json").read_text())["backend"]
    assert record["requested"] == "auto"
    reason = backend.cuda_unavailable_reason()
    assert record["note"] == ("" if reason is None else f"auto: no CUDA ({reason}); running on cpu")


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


CACHED_KERNEL = """
import sys, taichi as ti
from engine import backend
if sys.argv[2] == "ours":
    backend._start("cpu", kernel_profiler=False)
else:
    ti.init(arch=ti.cpu, offline_cache=True, verbose=False)
@ti.kernel
def twice(x: ti.f32) -> ti.f32:
    return 2.0 * x
print(twice(1.5))
"""


def test_a_stale_taichi_cache_lock_is_cleared_at_start(tmp_path):
    """Taichi compiles without its cache while a lock file is left in it (the fact clear_stale_cache_locks
    exists for; this fails loudly if an upgrade changes it), and backend start-up removes a stale one."""
    import os
    import time

    cache = tmp_path / "ticache"
    env = {**os.environ, "TI_OFFLINE_CACHE_FILE_PATH": str(cache)}
    script = tmp_path / "cached_kernel.py"  # Taichi reads a kernel's source from its file
    script.write_text(CACHED_KERNEL)

    def run(who: str) -> str:
        result = subprocess.run([sys.executable, str(script), str(cache), who], capture_output=True,
                                text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout + result.stderr

    run("taichi")  # fills the cache
    lock = cache / "ticache.lock"
    lock.touch()
    assert "ticache.lock failed" in run("taichi")  # a lock left behind: Taichi gives up on the cache
    old = time.time() - backend.STALE_LOCK_S - 5
    os.utime(lock, (old, old))
    output = run("ours")
    assert "removed a stale Taichi cache lock" in output and "failed" not in output
    assert not lock.exists()


def test_a_fresh_cache_lock_is_left_to_its_holder(tmp_path):
    held = tmp_path / "ticache" / "ticache.lock"
    held.parent.mkdir()
    held.touch()
    stale = tmp_path / "ticache" / "vulkan" / "metadata.lock"
    stale.parent.mkdir()
    stale.touch()
    assert backend.clear_stale_cache_locks(tmp_path / "ticache", now=held.stat().st_mtime + 10) == []
    assert held.exists() and stale.exists()
    removed = backend.clear_stale_cache_locks(tmp_path / "ticache", now=held.stat().st_mtime + 1e4)
    assert sorted(removed) == sorted([held, stale]) and not held.exists() and not stale.exists()


FIELDS_AFTER = """
import sys, taichi as ti
from engine import backend
backend.init(sys.argv[1])
@ti.kernel
def touch(a: ti.types.ndarray()):
    a[0] = 1.0
if sys.argv[2] == "ndarray-kernel-first":
    touch(ti.ndarray(ti.f32, 4))
builder = ti.FieldsBuilder()
x = ti.field(ti.f32)
builder.dense(ti.i, 4).place(x)
print(builder.finalize().id)
"""


@pytest.mark.parametrize("arch", ["cpu", *OTHER_ARCHS])
def test_fields_get_the_same_tree_whatever_the_process_launched_before(arch, tmp_path):
    """Taichi's offline cache keys a kernel by the SNode ids of its fields, and the first launch or sync of a program
    turns the empty default tree into tree 0: unless `backend.init` does that, a process that launched an ndarray
    kernel first (the window's first frame) numbered its fields one later and compiled every kernel again. Unpinned
    cpu pools (SHANNON_PIN_THREADS=0) launch nothing at start, like cuda and vulkan."""
    if arch != "cpu":
        backend_worker(arch)  # skips (or fails in CI) where the arch is missing, as the suite does
    script = tmp_path / "fields_after.py"  # a file: Taichi reads a kernel's source
    script.write_text(FIELDS_AFTER)
    trees = {order: subprocess.run([sys.executable, str(script), arch, order], capture_output=True, text=True,
                                   env={**os.environ, "SHANNON_PIN_THREADS": "0"}, check=True).stdout.split()[-1]
             for order in ("fields-first", "ndarray-kernel-first")}
    assert trees == {"fields-first": "1", "ndarray-kernel-first": "1"}


@pytest.mark.parametrize("ending", ["normal", "SIGTERM"])
def test_a_command_leaves_what_it_compiled_in_the_kernel_cache(ending, tmp_path):
    """Taichi writes its offline cache only when its program is finalized; at exit that happened only when nothing
    referenced it any more, and `python -m app render` (as the acceptance) left its kernels out: every run compiled
    them again. `backend.init` stops Taichi at exit, and a SIGTERM'd run ends through the same exit."""
    import signal
    import time

    env = {**os.environ, "TI_OFFLINE_CACHE_FILE_PATH": str(tmp_path / "cache")}
    frames = ["--frames", "10000"] if ending == "SIGTERM" else []
    command = [sys.executable, "-m", "app", "render", "--width", "16", "--height", "8", "--arch", "cpu",
               "--out", str(tmp_path / "out"), *frames]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if ending == "SIGTERM":
        deadline = time.monotonic() + 120
        while not (tmp_path / "out" / "frames" / "frame_0000.png").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == (0 if ending == "normal" else 130), stderr
    assert any(path.suffix == ".tic" for path in (tmp_path / "cache").rglob("*")), f"nothing cached ({ending})"
