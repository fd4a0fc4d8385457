"""Affine acceptance on every backend: forward analytic, backward = 2, finite-difference gradcheck."""
import json
import subprocess
import sys

import numpy as np

from engine.autodiff.gradcheck import compare_gradients


def test_forward_and_backward_are_analytic(worker):
    x = np.random.default_rng(1).uniform(-10, 10, 1024).astype(np.float32)
    out = worker.call("affine", x=x)
    np.testing.assert_array_equal(out["y"], np.float32(2) * x + np.float32(0.5))
    np.testing.assert_array_equal(out["dx"], np.full(1024, 2.0, np.float32))
    assert abs(float(out["loss"]) - np.sum(2.0 * x.astype(np.float64) + 0.5)) < 1e-2  # float32 sum of 1024 terms


def test_gradcheck_in_float64(worker):
    x = np.random.default_rng(2).uniform(-1, 1, 64)
    out = worker.call("affine_gradcheck", x=x)
    report = compare_gradients(out["analytic"], out["numeric"], atol=1e-8, rtol=1e-8)
    assert report.passed, report
    np.testing.assert_array_equal(out["analytic"], np.full(64, 2.0))


def test_headless_affine_end_to_end(tmp_path):
    result = subprocess.run([sys.executable, "-m", "app", "--headless", "--only", "affine", "--arch", "cpu",
                             "--parity-arch", "vulkan", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "\u2713 forward: cpu == vulkan == analytic (1024 elements)" in lines
    assert "\u2713 backward: cpu == vulkan == 2 (analytic)" in lines
    assert "\u2713 gradcheck: analytic gradient confirmed by finite differences" in lines
    assert "AFFINE ACCEPTANCE PASSED" in lines
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["arch"] == "cpu" and report["parity_arch"] == "vulkan" and report["taichi"] == "1.7.4"
    claim = report["claims"][0]
    assert claim["name"] == "affine" and claim["passed"]
    assert set(claim["metrics"]) == {"forward_max_abs_err", "backward_max_abs_err", "gradcheck_max_rel_err"}
