"""A backend worker driven from a background thread, so the UI thread never waits on Taichi.

Taichi 1.7.4 holds the GIL while a kernel runs (cpu) and while it syncs (vulkan):
a kernel launched from any thread of the UI process freezes the window for as long
as it runs (measured: a 0.75 s cpu kernel in a thread blocked the main thread for
0.75 s). So the app never runs Taichi in its own process. Each backend lives in an
`engine.worker.BackendWorker` process, and a `WorkerLink` thread talks to it; waiting
on the pipe releases the GIL.

Workers run at a lower CPU priority (nice +10) than the window: on a 2-core machine a
running fit would otherwise take the cores the UI needs to draw (the CPU backend and
llvmpipe both want every core). Linux keeps nice values per thread and a child
process inherits its creating thread's, so the link thread lowers its own priority
just before it spawns the worker; the UI thread keeps its own.

Requests go into named slots. In a replacing slot the newest request wins (a frame
for an old camera angle is never rendered); a queueing slot keeps every request in
order (Reset, then Step). Queueing slots go first, then the replacing slots in
`priorities` order; the link runs `idle_request` (the running fit's next batch) when
nothing waits, and also every other turn while only replacing slots wait, so a
playing timeline (a new frame request every frame) cannot starve a running fit.
Answers land on `answers`, which the controller drains on the UI thread; `on_answer` (the app: wake the
window, `app.ui.app.wake_window`) is called after each, so an idling window draws the new content and sends the
next request at once instead of at its next idle frame.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.worker import DEFAULT_TIMEOUT_S, BackendWorker, WorkerError, exit_description

WORKER_NICE = 10  # scheduling priority of the backend workers relative to the window


@dataclass
class Request:
    slot: str
    name: str  # a computation name or "module:function" run in the worker
    inputs: dict
    context: Any = None  # travels with the answer, never sent to the worker
    timeout_s: float = DEFAULT_TIMEOUT_S  # how long the worker may take (a first compile can take minutes)


@dataclass
class Answer:
    request: Request
    outputs: dict | None  # None when the call failed
    error: str = ""
    extra: dict = field(default_factory=dict)  # what `post` computed off the UI thread
    kernels: int = 0  # Taichi kernels the worker prepared (compiled or loaded) during the call


class WorkerLink:
    """One backend worker and the thread that feeds it. See the module docstring."""

    def __init__(self, arch: str, priorities: tuple[str, ...], queued: tuple[str, ...] = (),
                 post: Callable[[Answer], None] | None = None, on_answer: Callable[[], None] | None = None):
        self.arch = arch
        self.status = "starting"  # "starting", "ready", "busy", or "unavailable: <why>"
        self.backend: dict = {}  # the worker's record of what actually runs (once ready)
        self.in_flight: str = ""  # the computation running now, "" when none
        self._kernels_at_call = 0  # the worker's count of kernels prepared when the call in flight began
        self.answers: "queue.Queue[Answer]" = queue.Queue()
        self.idle_request: Request | None = None  # set from the UI thread; read here
        self._priorities = priorities
        self._queued = set(queued)
        self._slots: dict[str, deque[Request]] = {slot: deque() for slot in priorities}
        self._post = post
        self._on_answer = on_answer
        self._wake = threading.Condition()
        self._stop = False
        self._idle_turn = False  # True: the idle request goes before replacing slots next time
        self._worker: BackendWorker | None = None
        self._thread = threading.Thread(target=self._run, name=f"link-{arch}", daemon=True)

    @property
    def kernels_in_call(self) -> int:
        """Taichi kernels the worker has begun to prepare (compile or load) since the call in flight began."""
        worker = self._worker
        return worker.kernels_prepared - self._kernels_at_call if worker is not None and self.in_flight else 0

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def send(self, request: Request) -> None:
        """Queue `request` in its slot (replacing what waits there unless the slot queues)."""
        with self._wake:
            slot = self._slots[request.slot]
            if request.slot not in self._queued:
                slot.clear()
            slot.append(request)
            self._wake.notify()

    def pending(self, slot: str) -> int:
        with self._wake:
            return len(self._slots[slot])

    def poke(self) -> None:
        """Wake the thread (after `idle_request` was set)."""
        with self._wake:
            self._wake.notify()

    def _next(self) -> Request | None:
        with self._wake:
            while not self._stop:
                idle = self.idle_request
                order = sorted(self._priorities, key=lambda slot: slot not in self._queued)  # stable: queued first
                for slot in order:
                    if self._slots[slot] and not (idle is not None and self._idle_turn and slot not in self._queued):
                        self._idle_turn = idle is not None
                        return self._slots[slot].popleft()
                if idle is not None:
                    self._idle_turn = False
                    return idle
                self._wake.wait(0.5)
                if self._worker is not None and not self._worker.alive:  # died between calls: say so, stop
                    self.status = f"unavailable: the {self.arch} worker died ({exit_description(self._worker.exitcode)})"
                    return None
            return None

    def _run(self) -> None:
        try:  # this thread only (Linux): the worker spawned from it inherits the lower priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)
        except (OSError, AttributeError):
            pass  # elsewhere the workers run at the window's priority
        try:
            self._worker = BackendWorker(self.arch)
        except Exception as exc:  # WorkerError, or the process could not even be spawned
            self.status = f"unavailable: {exc}"
            return
        self.backend = self._worker.backend
        self.status = "ready"
        while (request := self._next()) is not None:
            self._kernels_at_call = self._worker.kernels_prepared
            self.in_flight, self.status = request.name, "busy"
            try:
                answer = Answer(request, self._worker.call(request.name, timeout_s=request.timeout_s,
                                                           **request.inputs))
            except WorkerError as exc:
                answer = Answer(request, None, error=str(exc))
            except (OSError, EOFError, ValueError):  # `close` killed the worker under a call
                if self._stop:
                    return
                raise
            answer.kernels = self._worker.kernels_prepared - self._kernels_at_call
            if answer.outputs is not None and self._post is not None:
                self._post(answer)
            self.in_flight = ""
            self.answers.put(answer)
            if self._on_answer is not None:
                self._on_answer()
            if not self._worker.alive:
                self.status = f"unavailable: the {self.arch} worker stopped ({answer.error})"
                return
            self.status = "ready"
        self._worker.close()

    def request_stop(self) -> None:
        """Ask the thread to stop, and a worker busy in a call to leave after the kernel it is compiling or running
        (through its exit, which writes the kernels it compiled to the cache: `BackendWorker.request_exit`); returns
        at once. `close` then waits."""
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self.in_flight and self._worker is not None:
            self._worker.request_exit()

    def close(self, wait_s: float = 2.0) -> None:
        """Stop the thread (`request_stop`); a worker still running after `wait_s` is killed."""
        self.request_stop()
        if not self.started:
            return
        self._thread.join(wait_s)
        if self._thread.is_alive() and self._worker is not None:
            self._worker.kill()
            self._thread.join(2.0)
