"""The runnable examples in docstrings (`>>>` lines) run and show what they say: doctest, on the cpu.

Every module of app/ and engine/ with a `>>>` line is run, so a new example is checked as soon as it
is written, and an API change that breaks one fails here with the example's own output.
"""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(".".join(path.relative_to(ROOT).with_suffix("").parts)
                 for package in ("app", "engine") for path in (ROOT / package).rglob("*.py")
                 if ">>> " in path.read_text())


def test_the_public_api_has_runnable_examples():
    assert {"engine.autodiff.tape", "engine.dispatch", "engine.render", "engine.chamfer_loss",
            "app.scenes.shape_fit"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, ti_cpu):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} examples in {name}"
