"""The sources pass ruff (its rules and line length in pyproject.toml): unused imports, undefined names, long lines."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("app", "engine", "bench", "tests", "scripts", "distribution", "examples")


def test_the_sources_pass_ruff():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is missing: `bash scripts/setup.sh` installs it (the dev extra)")
    folders = [f for f in FOLDERS if (ROOT / f).is_dir()]
    run = subprocess.run([ruff, "check", "--output-format", "concise", *folders], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
