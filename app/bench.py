"""`python -m app bench NAME|all [...]`: run one benchmark (or all) and print its table."""
from __future__ import annotations

import importlib

from engine.errors import UserError

BENCHMARKS: dict[str, str] = {  # name -> "module:function"
    "launch": "bench.launch:main",
    "closest": "bench.closest:main",
    "fit_overhead": "bench.fit_overhead:main",
    "raymarch": "bench.raymarch:main",
    "gui_fps": "bench.gui_fps:main",
    "batch": "bench.batch:main",
}
NEEDS_DISPLAY = {"gui_fps"}  # left out of `all`, which must run on a headless GPU machine


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m app bench {{{'|'.join([*BENCHMARKS, 'all'])}}} [options]")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name != "all" and name not in BENCHMARKS:
        raise UserError(f"unknown benchmark '{name}' (known: {', '.join([*BENCHMARKS, 'all'])})")
    status = 0
    for each in [each for each in BENCHMARKS if each not in NEEDS_DISPLAY] if name == "all" else [name]:
        module, function = BENCHMARKS[each].split(":")
        status |= getattr(importlib.import_module(module), function)(rest)
    return status
