"""SIGINT and SIGTERM: stop long work at a safe point instead of losing it.

Two ways to be stopped, both ending in exit code 130 with the work so far written:

- `graceful_stop()`: a loop (a fit's iterations, an animation's frames) asks the flag
  between steps and stops after the step in progress, then writes its outputs marked
  `"interrupted": true`. A second SIGINT raises `Interrupted` at once (the user insists).
- `raise_on_signals()`: SIGINT and SIGTERM raise `Interrupted` where the program is
  (the headless runner, the CLI around everything): `finally` blocks run, so temporary
  files are removed and worker processes shut down.

Python runs signal handlers in the main thread only; elsewhere (a Ray task, a GUI
thread) both context managers install nothing and the flag never rises.

    with graceful_stop() as stop:
        for i in range(n):
            if stop:                      # truthy once a signal came: stop.signal_name says which
                break
            step()
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from engine.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopFlag:
    """Raised by a caught signal; truthy once raised. `signal_name` says which ("" before)."""

    def __init__(self) -> None:
        self.signal_name = ""

    def __bool__(self) -> bool:
        return bool(self.signal_name)

    def request(self, signal_name: str) -> None:
        """Ask the loop to stop, as a signal would (also for callers that stop a run themselves)."""
        self.signal_name = self.signal_name or signal_name


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _handlers(handler) -> Iterator[None]:
    if not _in_main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def graceful_stop(flag: StopFlag | None = None) -> Iterator[StopFlag]:
    """SIGINT/SIGTERM raise the flag; a second SIGINT raises `Interrupted` now (see the module docstring)."""
    flag = StopFlag() if flag is None else flag

    def handler(signum, _frame) -> None:
        name = signal.Signals(signum).name
        if flag and signum == signal.SIGINT:
            raise Interrupted(name)
        flag.request(name)

    with _handlers(handler):
        yield flag


@contextmanager
def raise_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` wherever the main thread is."""

    def handler(signum, _frame) -> None:
        raise Interrupted(signal.Signals(signum).name)

    with _handlers(handler):
        yield


@contextmanager
def signals_ignored() -> Iterator[None]:
    """SIGINT ignored while a child process starts: the child inherits it and never sees the terminal's Ctrl-C.

    Its parent shuts it down instead (see `engine.worker`). Main thread only; elsewhere a no-op."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
