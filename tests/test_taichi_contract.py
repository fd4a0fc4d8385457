"""The Taichi behaviour this design relies on. An upgrade that changes any of it fails here.

- the pinned version;
- ndarray reverse-mode AD is silently zero on Vulkan (why engine.fields uses fields);
- field AD through FieldGroup works on every backend.
"""
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
