"""Every example in examples/ runs as a user runs it.

Each example runs headless on the cpu in a fresh interpreter from an empty folder (so it finds
the project through its installation, as a user's script would), must exit 0 (each checks its
own result) and print the lines `EXPECTED` names for it. A new file in examples/ is run as
soon as it exists, and fails until it has a row in `EXPECTED`.

The README's own snippets are shorter complete programs, run by tests/test_readme.py. The window
of each example (app/ui/viewer.py) is checked under Xvfb here too.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
ARGS = {"compare_backends": ["--arch", "cpu", "--parity-arch", "vulkan"]}  # the others: --arch cpu
EXPECTED = {  # example -> regular expressions its output must match
    "tape_basics": [r"max \|tape - formula\| = \d", r"200 Adam steps: L = -?\d+\.\d -> -10\d\d\.\d"],
    "native_launch": [r"bit-identical", r"per launch: plain call [\d.]+ us, native [\d.]+ us"],
    "closest_points": [r"misses 0", r"max relative difference of squared distances: 0\.0e\+00, after refit"],
    "fit_sphere_to_mesh": [r"spot: loss .* in 200 iterations, [\d.]+ orders of decrease, 0 misses",
                           r"wrote out/examples/fit_spot\.obj and \.png"],
    "render_frame": [r"256x128 at t=0\.5: \d+ ms", r"wrote out/examples/frame\.png"],
    "compare_backends": [r"backends: cpu \(A\) and vulkan \(B\)", r"A vs B: [\d.]+% within 0\.0001"],
    "inverse_render": [r"256x128, \d+ steps: image loss [\d.e+-]+ -> [\d.e+-]+, joints off by [\d.]+ -> 0\.\d+ "
                       r"degrees \(worst joint\): CONVERGED", r"wrote out/examples/invert\.png"],
}
needs_display = pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="needs a display (scripts/test.sh runs Xvfb)")


def test_there_are_examples_and_each_has_its_expected_output():
    assert len(EXAMPLES) >= 4
    assert sorted(path.stem for path in EXAMPLES) == sorted(EXPECTED), "an example without its row in EXPECTED"


SLOW = {"inverse_render"}  # a pose recovery on the ray-marched scene: half a minute; the quick loop runs the others


@pytest.mark.parametrize("path", [pytest.param(path, marks=pytest.mark.slow) if path.stem in SLOW else path
                                  for path in EXAMPLES], ids=lambda path: path.stem)
def test_example_runs_headless_and_checks_itself(path, tmp_path):
    command = [sys.executable, str(path), "--headless", *ARGS.get(path.stem, ["--arch", "cpu"])]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{path.name} exited {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}"
    for pattern in EXPECTED.get(path.stem, ["(no row in EXPECTED)"]):
        assert re.search(pattern, result.stdout), f"{path.name}: no line matches {pattern!r} in:\n{result.stdout}"


@needs_display
def test_the_example_windows_show_their_result():
    from app.ui.viewer import show_curves, show_image

    image = np.zeros((40, 60, 3), np.uint8)
    image[10:20, 5:25] = (0, 255, 0)
    shot = show_image("test", image, frames=3)
    assert np.count_nonzero(np.all(shot[..., :3] == (0, 255, 0), axis=-1)) == 200  # every pixel of the square
    x = np.linspace(0.0, 1.0, 50)
    assert show_curves("test", x, {"x^2": x * x}, log_y=True, frames=3).shape[:2] == (500, 800)
