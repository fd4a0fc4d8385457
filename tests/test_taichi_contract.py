"""The Taichi behaviour this design relies on. An upgrade that changes any of it fails here.

- the pinned version;
- ndarray reverse-mode AD is silently zero on Vulkan (why engine.fields uses fields);
- field AD through FieldGroup works on every backend;
- with fast_math off no backend fuses a multiply and an add into one FMA (the claims that compare
  cpu and vulkan bit for bit, app/claims/sgd_oracle.py, rely on it);
- the cpu backend compiles for this machine's CPU (AVX where it has AVX), with no switch of ours
  (docs/RESULTS.md, "Taichi's CPU target");
- freeing an SNode tree drops every compiled kernel of the process, and a kernel instance's
  template key holds the field objects it was given (engine.fields.FieldGroup.destroy puts back
  the instances given none of the freed group's fields).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import taichi as ti

from tests.conftest import backend_worker


def ndarray_grad_probe() -> dict:
    @ti.kernel
    def double(x: ti.types.ndarray(), y: ti.types.ndarray()):
        for i in x:
            y[i] = 2.0 * x[i]

    x = ti.ndarray(ti.f32, shape=4, needs_grad=True)
    y = ti.ndarray(ti.f32, shape=4, needs_grad=True)
    x.from_numpy(np.arange(4, dtype=np.float32))
    double(x, y)
    y.grad.fill(1.0)
    double.grad(x, y)
    return {"dx": x.grad.to_numpy()}


def fma_probe() -> dict:
    @ti.kernel
    def multiply_add(a: ti.f32, b: ti.f32, c: ti.f32) -> ti.f32:
        return a * b + c

    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (a tie, to even) to 1 + 2^-11: the separate operations give 0,
    # one fused multiply-add gives the 2^-24 that the rounding dropped.
    a = 1.0 + 2.0 ** -12
    return {"value": multiply_add(a, a, -(1.0 + 2.0 ** -11))}


def field_group_destroy_probe() -> dict:
    """What freeing fields drops and keeps, and that the kernels kept, and those given a later
    group's field, read the right fields."""
    from engine.fields import FieldGroup

    @ti.kernel
    def doubled(values: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(out.shape[0]):
            out[i] = 2.0 * values[i]

    @ti.kernel
    def scaled(source: ti.template(), factor: ti.template(), out: ti.types.ndarray()):
        for i in range(out.shape[0]):
            out[i] = source[i] * factor

    values, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    doubled(values, out)
    builder = ti.FieldsBuilder()
    builder.dense(ti.i, 4).place(ti.field(ti.f32))
    builder.finalize().destroy()  # Taichi's own free
    taichi_kept = len(doubled._primal.compiled_kernels)
    staying = FieldGroup()
    stays = staying.field(ti.f32, (4,))
    staying.finalize()
    stays.from_numpy(values + 100.0)
    seen, kept = [], []
    for offset in (10.0, 20.0):  # the second group takes the first one's place
        group = FieldGroup()
        field = group.field(ti.f32, (4,), needs_grad=True)
        group.finalize()
        field.from_numpy(values + offset)
        doubled(values, out)
        scaled(stays, 2.0, out)
        scaled(field, 3.0, out)
        seen.append(out.copy())
        scaled(field.grad, 3.0, out)  # a gradient field is freed with its group too
        group.destroy()
        kept.append(len(scaled._primal.compiled_kernels))
        scaled(stays, 2.0, out)
        seen.append(out.copy())
    staying.destroy()
    return {"taichi_kept": taichi_kept, "doubled_kept": len(doubled._primal.compiled_kernels),
            "scaled_kept": kept, "scaled_left": len(scaled._primal.compiled_kernels), "seen": np.array(seen)}


HOST_TARGET_PROBE = """
import taichi as ti
ti.init(arch=ti.cpu, fast_math=False, print_kernel_asm=True, print_kernel_llvm_ir_optimized=True)
x = ti.field(ti.f32, 64)
@ti.kernel
def scale(a: ti.f32):
    for i in x:
        x[i] = x[i] * a
scale(2.0)
"""


def test_taichi_is_the_pinned_version():
    assert ti.__version__ == (1, 7, 4), "engine relies on taichi 1.7.4 behaviour: re-verify this file before upgrading"


def test_ndarray_autodiff_is_broken_on_vulkan_but_not_cpu():
    np.testing.assert_array_equal(backend_worker("cpu").call("tests.test_taichi_contract:ndarray_grad_probe")["dx"], 2.0)
    vulkan_dx = backend_worker("vulkan").call("tests.test_taichi_contract:ndarray_grad_probe")["dx"]
    assert np.all(vulkan_dx == 0.0), "Vulkan ndarray AD now works: the fields-only rule in engine/fields.py can be relaxed"


def test_kernel_cache_is_not_evicted_at_taichi_default_size(ti_cpu):
    # Taichi's default (100 MiB, oldest first) evicted this project's own kernels between runs.
    from engine.backend import OFFLINE_CACHE_BYTES

    assert ti.lang.impl.current_cfg().offline_cache_max_size_of_files == OFFLINE_CACHE_BYTES >= 1 << 30


def test_freeing_a_field_group_drops_only_the_kernels_given_its_fields():
    for arch in ("cpu", "vulkan"):
        found = backend_worker(arch).call("tests.test_taichi_contract:field_group_destroy_probe")
        assert found["taichi_kept"] == 0, f"{arch}: Taichi now keeps kernels when a tree is freed: FieldGroup.destroy " \
                                          "need not put them back"
        assert found["doubled_kept"] == 1, arch  # the ndarray kernel's instance survives every free
        assert found["scaled_kept"] == [1, 1] and found["scaled_left"] == 0, arch  # only the surviving group's
        base = np.arange(4)
        np.testing.assert_array_equal(found["seen"], [(base + 10.0) * 3.0, (base + 100.0) * 2.0,
                                                      (base + 20.0) * 3.0, (base + 100.0) * 2.0])


def test_no_backend_contracts_a_multiply_add_into_an_fma():
    for arch in ("cpu", "vulkan"):
        value = backend_worker(arch).call("tests.test_taichi_contract:fma_probe")["value"]
        assert value == 0.0, f"{arch} fused a * b + c into one FMA ({value!r}): bitwise cpu/vulkan claims will break"


def test_cpu_kernels_are_compiled_for_this_machines_cpu(tmp_path):
    # Taichi builds its CPU target machine from llvm::sys::getHostCPUName() (codegen_cpu.cpp) and its JIT from
    # JITTargetMachineBuilder::detectHost() (jit_cpu.cpp); only its runtime's own functions say target-cpu x86-64.
    env = {**os.environ, "TI_OFFLINE_CACHE_FILE_PATH": str(tmp_path / "cache")}  # compile, do not load
    (tmp_path / "probe.py").write_text(HOST_TARGET_PROBE)  # Taichi reads a kernel's source from its file
    run = subprocess.run([sys.executable, "probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ir = (tmp_path / "taichi_kernel_cpu_llvm_ir_optimized_0000.ll").read_text()
    kernel = next(line for line in ir.splitlines() if line.startswith("define") and "scale" in line)
    attributes = kernel.rsplit("#", 1)[1].split()[0]
    group = next(line for line in ir.splitlines() if line.startswith(f"attributes #{attributes} "))
    assert "target-cpu" not in group and "target-features" not in group, group
    assembly = (tmp_path / "taichi_kernel_cpu_llvm_ir_optimized_asm_0000.s").read_text()
    cpuinfo = Path("/proc/cpuinfo").read_text()
    has_avx = "avx" in cpuinfo.split()
    # LLVM 15 (Taichi 1.7.4's) names AMD CPUs up to family 25 (Zen 3); a later one (Zen 5: family 26) is "generic"
    # to getHostCPUName, so the optimiser targets baseline x86-64 there (the JIT still encodes for the host's
    # features; docs/RESULTS.md, issue 12 on the Zen 5 host). A newer LLVM that knows it fails here, on purpose.
    family = int(re.search(r"^cpu family\s*:\s*(\d+)", cpuinfo, re.M).group(1))
    named = not ("AuthenticAMD" in cpuinfo and family > 25)
    assert ("vmulss" in assembly) == (has_avx and named), \
        f"the cpu kernel's multiply is not encoded as expected for this CPU (family {family}, avx {has_avx})"
