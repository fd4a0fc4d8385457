"""Terminal progress: one style of bar for compile/warm-up, iterations and renders, and a line while a kernel compiles."""
from __future__ import annotations

import logging
import multiprocessing
import sys
from contextlib import contextmanager
from typing import Iterable, Iterator, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def _quiet() -> bool:
    return not logging.getLogger("engine").isEnabledFor(logging.INFO) or not sys.stderr.isatty()


def bar(iterable: Iterable[T] | None = None, total: int | None = None, desc: str = "") -> tqdm:
    """A tqdm bar on stderr; silent when stderr is not a terminal or logging is quieter than INFO (`-q`)."""
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, disable=_quiet(), dynamic_ncols=True)


@contextmanager
def kernel_compiling(k: int, name: str) -> Iterator[None]:
    """While Taichi compiles kernel `name` (or loads it from its offline cache), the k-th this process prepares
    (`engine.kernel_count` wraps each first compile in this): a line on stderr that says so, erased when it is done.
    Only in the process a person started (a worker's or a batch job's stderr is not its own), on a terminal, above
    `-q`: a first run compiles for minutes, and without it a command would sit silent meanwhile."""
    show = not _quiet() and multiprocessing.parent_process() is None
    if show:
        sys.stderr.write(f"\r\x1b[2Kcompiling kernel {k} ({name}; once per machine, then loaded from Taichi's cache)")
        sys.stderr.flush()
    try:
        yield
    finally:
        if show:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
