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
