"""Claims that go wrong on purpose (registered by tests/test_misuse.py for the headless runner).

The claim's name says what happens: a bug in the claim itself, or its parity worker is
SIGSTOPped or SIGKILLed in the middle of a call.
"""
import os
import signal
import threading


def _after(seconds: float, action) -> None:
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()


def run(ctx) -> None:
    if ctx.name == "crashes":
        ctx.check(True, "a check before the bug")
        raise ZeroDivisionError("a bug in a claim")
    worker = ctx.parity
    sig = {"worker_stopped": signal.SIGSTOP, "worker_killed": signal.SIGKILL}[ctx.name]
    _after(0.5, lambda: os.kill(worker.pid, sig))
    worker.call("tests.worker_faults:hang", timeout_s=120)
