"""The version of shannon-autograd that is running, as `--version` and Help > About show it."""
from __future__ import annotations

import importlib.metadata

DISTRIBUTION = "shannon-autograd"


def version() -> str:
    """The installed distribution's version ("0.1.0"), or "(not installed)" when run from a bare checkout.

        >>> version() == "(not installed)" or version().count(".") >= 2
        True
    """
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
