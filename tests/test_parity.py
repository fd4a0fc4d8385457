"""The parity harness: equal inputs agree, a perturbed input is caught, broken workers are reported."""
import subprocess
import sys

import numpy as np
import pytest

from engine.parity import compare, compare_outputs, run_parity
from engine.worker import BackendWorker, WorkerError
from tests.conftest import backend_worker


def test_compare_finds_the_worst_element():
    a = np.zeros((4, 5), np.float32)
    b = a.copy()
    b[2, 3] = 0.5
    b[0, 0] = 1e-6
    report = compare(a, b, atol=1e-5)
    assert report.count == 20
    assert report.share_within == pytest.approx(19 / 20)
    assert report.max_abs_err == pytest.approx(0.5)
    assert report.max_rel_err == pytest.approx(1.0)
    assert report.worst_index == (2, 3)
    assert not report.passed() and report.passed(min_share=0.9)


def test_compare_never_lets_nan_agree():
    a = np.array([1.0, np.nan, np.inf])
    b = np.array([1.0, np.nan, np.inf])
    report = compare(a, b, atol=1.0)
    assert report.share_within == pytest.approx(2 / 3)
    assert report.max_abs_err == np.inf and report.worst_index == (1,)


def test_compare_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="shapes differ"):
        compare(np.zeros(3), np.zeros(4), 0.0)


def test_equal_inputs_agree_across_backends():
    x = np.linspace(-3, 3, 1024, dtype=np.float32)
    reports = run_parity("affine", {"x": x}, "cpu", "vulkan", atol=0.0)
    assert set(reports) == {"y", "dx", "loss"}
    assert reports["y"].share_within == 1.0 and reports["dx"].max_abs_err == 0.0


def test_a_perturbed_input_is_caught():
    cpu, vulkan = backend_worker("cpu"), backend_worker("vulkan")
    x = np.linspace(-3, 3, 1024, dtype=np.float32)
    perturbed = x.copy()
    perturbed[517] += 1e-3
    reports = compare_outputs(cpu.call("affine", x=x), vulkan.call("affine", x=perturbed), atol=1e-4)
    assert reports["y"].worst_index == (517,)
    assert reports["y"].share_within == pytest.approx(1023 / 1024)
    assert reports["y"].max_abs_err == pytest.approx(2e-3, rel=1e-2)
    assert not reports["y"].passed()


def test_a_crashing_worker_gives_a_clear_error():
    with BackendWorker("cpu") as worker:
        with pytest.raises(WorkerError,
                           match=r"cpu worker died during computation tests.worker_faults:crash \(exit code 3\)"):
            worker.call("tests.worker_faults:crash")
        assert not worker.alive


def test_a_hanging_worker_times_out():
    with BackendWorker("cpu") as worker:
        with pytest.raises(WorkerError, match="did not finish computation tests.worker_faults:hang within 2 s"):
            worker.call("tests.worker_faults:hang", timeout_s=2)
        assert not worker.alive


def test_an_exception_in_a_worker_is_reported_and_the_worker_survives():
    worker = backend_worker("cpu")
    with pytest.raises(WorkerError, match="ValueError: deliberate failure"):
        worker.call("tests.worker_faults:raise_error")
    assert worker.alive
    with pytest.raises(WorkerError, match="unknown computation 'nope'"):
        worker.call("nope")


def test_a_script_starting_workers_without_a_main_guard_is_told_so(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text("from engine.worker import BackendWorker\nBackendWorker('cpu').close()\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode != 0
    assert 'if __name__ == "__main__":' in result.stderr.splitlines()[-1]
