"""The README's Python snippets run exactly as written, each in a fresh interpreter.

A snippet that stops working (a renamed function, a missing backend start, an import that moved)
fails here with its own output. They run from an empty folder, as a user's script would, so they
find the package through its installation, not through the working directory; `scripts/wheel_check.sh`
runs this file again against the built wheel installed in a fresh venv on Python 3.12 and on 3.13.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_snippets():
    assert len(SNIPPETS) >= 6


@pytest.mark.parametrize("index", range(len(SNIPPETS)), ids=lambda i: f"snippet{i + 1}")
def test_readme_snippet_runs_as_written(index, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(SNIPPETS[index])
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, f"README snippet {index + 1}:\n{SNIPPETS[index]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip() or not re.search(r"\bprint\(", SNIPPETS[index])
