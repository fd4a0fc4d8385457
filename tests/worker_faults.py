"""Computations that fail on purpose, to test how the worker reports failures."""
import os
import time


def crash() -> dict:
    os._exit(3)


def hang(seconds: float = 600.0) -> dict:
    time.sleep(seconds)
    return {}


def raise_error() -> dict:
    raise ValueError("deliberate failure")


def compile_then_hang(marker: str, seconds: float = 600.0) -> dict:
    """Compile and run a kernel, say so in the file `marker`, then stay busy: a worker with compiled work unsaved."""
    import pathlib

    import taichi as ti

    @ti.kernel
    def twice(x: ti.f32) -> ti.f32:
        return 2.0 * x

    twice(1.5)
    pathlib.Path(marker).write_text("compiled")
    time.sleep(seconds)
    return {}
