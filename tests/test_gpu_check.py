"""scripts/gpu_check.sh (issue 29 item 1): the device plan fits one 10-minute lease, and the dry run (every step on
the cpu, tiny sizes) runs each command line to exit 0 and lists every step in its summary.

The full dry run takes about 65 s here with warm kernel caches (minutes with cold ones: the differentiable
renderer compiles), so it is marked slow; a dry run of the cheapest steps and the plan run in the quick loop."""
from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STEPS = ("install", "cuda-tests", "acceptance", "bench-launch", "bench-raymarch", "bench-fit", "bench-invert",
         "bench-closest")
DEVICE_CALL_S = 600  # the device tool's most for one command, and the 10 minutes of device time


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _plan(text: str) -> tuple[dict[str, tuple[int, str]], int]:
    """{step: (limit s, command)} and the total from a printed plan."""
    steps = {m.group(1): (int(m.group(2)), m.group(3))
             for m in re.finditer(r"^  (\S+)\s+limit\s+(\d+) s  (.*)$", text, re.M)}
    total = int(re.search(r"total planned: (\d+) s", text).group(1))
    return steps, total


def _summary(folder: Path) -> dict[str, list[str]]:
    """{step: [rc, wall_s, limit_s, last line]} from summary.txt."""
    lines = (folder / "summary.txt").read_text().splitlines()
    assert lines[1].startswith("step\trc\twall_s\tlimit_s")
    return {row[0]: row[1:] for row in (line.split("\t") for line in lines[2:] if not line.startswith("#"))}


def test_device_plan_fits_one_lease():
    done = _run("--plan", "--install", "wheels")  # the lent H200s: offline, from scripts/gpu_wheels.sh's wheels
    assert done.returncode == 0, done.stderr
    steps, total = _plan(done.stdout)
    assert tuple(steps) == STEPS
    assert total == sum(limit for limit, _ in steps.values()) <= DEVICE_CALL_S - 20  # 20 s: archives, kill grace
    for name, (_, command) in steps.items():
        if "-m app" in command:
            assert "--arch cuda" in command, name
    assert "--parity-arch cpu" in steps["acceptance"][1] and "--only" not in steps["acceptance"][1]
    assert "-m cuda" in steps["cuda-tests"][1]


def test_dry_run_of_the_cheapest_steps(tmp_path):
    results, copies = tmp_path / "results", tmp_path / "copies"
    done = _run("--dry-run", "--steps", "acceptance,bench-launch,bench-fit", str(results), str(copies))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    steps, _ = _plan(done.stdout)
    assert tuple(steps) == ("install", "acceptance", "bench-launch", "bench-fit")
    assert all("--arch cpu" in command for name, (_, command) in steps.items() if name != "install")
    summary = _summary(results)
    assert list(summary) == list(steps)
    assert {name: row[0] for name, row in summary.items()} == dict.fromkeys(steps, "0")
    assert "ALL 2 CLAIMS PASSED" in summary["acceptance"][3]
    # what a lease that ends now would return: under the device tool's 8 files, the whole folder in the archive
    returned = sorted(p.name for p in copies.iterdir())
    assert returned == ["env.txt", "gpu.tar.gz", "logs.txt", "report.json", "summary.txt"]
    with tarfile.open(copies / "gpu.tar.gz") as archive:
        names = {Path(n).relative_to(results.name).as_posix() for n in archive.getnames() if n != results.name}
    assert {"summary.txt", "acceptance.log", "bench-launch.log", "bench/launch.json", "bench/launch.md",
            "bench/fit_iteration.md", "acceptance/report.json"} <= names


def test_a_step_the_budget_cannot_fit_is_not_run(tmp_path):
    done = _run("--dry-run", "--steps", "bench-launch", "--budget", "14", str(tmp_path))
    assert done.returncode == 1
    assert {name: row[0] for name, row in _summary(tmp_path).items()} == {"install": "not-run",
                                                                          "bench-launch": "not-run"}


def test_unknown_step_is_an_error():
    done = _run("--plan", "--steps", "bench-nothing")
    assert done.returncode == 2 and "unknown step 'bench-nothing'" in done.stderr


@pytest.mark.slow
def test_full_dry_run(tmp_path):
    done = _run("--dry-run", str(tmp_path / "results"), str(tmp_path / "copies"), timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    steps, total = _plan(done.stdout)
    assert tuple(steps) == STEPS and total == sum(limit for limit, _ in steps.values())
    summary = _summary(tmp_path / "results")
    assert tuple(summary) == STEPS
    assert {name: row[0] for name, row in summary.items()} == dict.fromkeys(STEPS, "0")
    for table in ("launch", "raymarch", "fit_iteration", "invert", "closest"):
        assert (tmp_path / "results" / "bench" / f"{table}.md").exists(), table


def test_the_cuda_test_step_does_not_wait_on_the_renderers_warm_up():
    """gpu_check.sh's test step runs `pytest -m cuda`: its renderer tests are cuda-marked, so the session must not
    start (and wait for) the cpu/vulkan warm-up, which runs at nice 19 and starves on a loaded machine (a loaded
    CI run's dry run timed out there, 2026-12-05)."""
    from types import SimpleNamespace

    from tests.conftest import needs_renderer_warm_up

    def item(module: str, cuda: bool):
        return SimpleNamespace(path=Path("tests") / module,
                               get_closest_marker=lambda name: object() if cuda and name == "cuda" else None)

    assert not needs_renderer_warm_up([item("test_diff_render.py", True), item("test_bvh.py", False)])
    assert needs_renderer_warm_up([item("test_diff_render.py", True), item("test_invert.py", False)])
    assert not needs_renderer_warm_up([item("test_bvh.py", False)])
