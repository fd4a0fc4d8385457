"""Terminal progress: one style of bar for compile/warm-up, iterations and renders."""
from __future__ import annotations

import logging
import sys
from typing import Iterable, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def bar(iterable: Iterable[T] | None = None, total: int | None = None, desc: str = "") -> tqdm:
    """A tqdm bar on stderr; silent when stderr is not a terminal or logging is quieter than INFO (`-q`)."""
    quiet = not logging.getLogger("engine").isEnabledFor(logging.INFO) or not sys.stderr.isatty()
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, disable=quiet, dynamic_ncols=True)
