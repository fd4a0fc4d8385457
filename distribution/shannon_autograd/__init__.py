"""shannon-autograd, installed from its wheel: the project's folders, kept together under one name.

The wheel puts the source folders `app/`, `engine/`, `bench/` and `assets/` here, in
site-packages/shannon_autograd/, rather than at the top of site-packages, so that installing
it never writes over, nor uninstalling it deletes, another project's `app` or `engine`.
`shannon_autograd.pth` (installed beside this folder) appends the folder to `sys.path`, so
that `python -m app ...` and `import engine` work as in a checkout, after every other
project's modules of those names. `main()` (the `shannon` command and
`python -m shannon_autograd`) puts the folder first instead, so that the command always runs
this project's `app`. See docs/ARCHITECTURE.md ("Packaging").
"""
from __future__ import annotations

import os
import sys

FOLDER = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    """`shannon ARGS...`: the same as `python -m app ARGS...` (see `app.cli`)."""
    if sys.path[:1] != [FOLDER]:
        sys.path.insert(0, FOLDER)
    from app.cli import main as cli_main

    return cli_main()
