"""What a piece of work costs the host: device launches and device-to-host synchronisations, counted.

    from engine.host_costs import count_host_costs

    with count_host_costs() as costs:
        fit.step()                                   # any work on the running backend
    costs.launches, costs.host_syncs                 # e.g. 31 and 1 (one iteration of a shape fit)
    costs.sync_sites                                 # Counter: where each sync was asked for ("file:line what")

Counted, while the block runs (issue 29 item 2; the same on every backend, so this counts on a machine without a GPU
what an iteration would cost a GPU):

- `kernels`: the project's kernels launched through the launch layer: `engine.launch.dispatch` (every `launch`,
  the tape's recorded launches, its adjoints in `backward` and its gradient fills, custom steps' launches), the
  bindings of `engine.dispatch` (`bind(...)()`, the BVH's own launches) and `LaunchSequence`s (one per launch);
- `data_ops`: Taichi's own host-facing calls on fields and ndarrays: `fill`, `from_numpy`, `to_numpy`/`to_torch`,
  `copy_from`, reading or writing one element (`f[None]`, `f[i]`): each launches one small kernel or more;
- `host_syncs`: the calls that make the host wait for the device: `to_numpy`/`to_torch`, reading an element,
  `ti.sync()` (also the one `engine.dispatch` makes after a kernel that returns a value or prints), `from_numpy`
  and a kernel launched with a numpy array argument (on CUDA Taichi copies such an array to the device and back
  after the kernel, waiting for it). On the CPU backends nothing queues, so nothing really waits there; the count
  is what the same code would wait for on a GPU.

`launches` = kernels + data_ops. A call made inside another counted call (Taichi's own methods calling each other)
counts once. Counting wraps those entry points only while a `count_host_costs` block is open (none of them is
wrapped otherwise: no cost outside), and blocks may nest (each counts everything in it).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

# Taichi's host-facing methods, by what they do: (waits for the device, is one data op)
_TAICHI_METHODS = {
    "to_numpy": True, "to_torch": True, "__getitem__": True, "from_numpy": True,
    "fill": False, "__setitem__": False, "copy_from": False,
}


@dataclass
class HostCosts:
    """Counts from one `count_host_costs` block (see the module docstring)."""

    kernels: int = 0
    data_ops: int = 0
    host_syncs: int = 0
    kernel_names: collections.Counter = field(default_factory=collections.Counter)
    data_op_names: collections.Counter = field(default_factory=collections.Counter)
    sync_sites: collections.Counter = field(default_factory=collections.Counter)

    @property
    def launches(self) -> int:
        return self.kernels + self.data_ops

    def sync(self, site: str) -> None:
        """Count one wait for the device, asked for at `site`."""
        self.host_syncs += 1
        self.sync_sites[site] += 1

    def as_record(self) -> dict:
        """A JSON-ready summary: the three counts, the launches, and where the syncs and launches came from."""
        return {"launches": self.launches, "kernels": self.kernels, "data_ops": self.data_ops,
                "host_syncs": self.host_syncs, "sync_sites": dict(sorted(self.sync_sites.items())),
                "kernel_names": dict(sorted(self.kernel_names.items())),
                "data_op_names": dict(sorted(self.data_op_names.items()))}


_active: list[HostCosts] = []
_depth = [0]  # > 0 inside a counted Taichi call: its inner calls are Taichi's own
_undo: list[tuple[Any, str, Any]] = []
_THIS = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(_THIS))


def _site(what: str) -> str:
    """"file:line what" of the project's frame nearest the call (outside this module and Taichi)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_ROOT) and path != _THIS and "site-packages" not in path and "/.venv/" not in path:
            return f"{os.path.relpath(path, _ROOT)}:{frame.f_lineno} {what}"
        frame = frame.f_back
    return what


def _kernel(name: str, args: Any) -> None:
    if _depth[0]:
        return
    numpy_arg = any(isinstance(arg, np.ndarray) for arg in args)
    site = _site(f"{name} with a numpy argument") if numpy_arg else None
    for costs in _active:
        costs.kernels += 1
        costs.kernel_names[name] += 1
        if site:
            costs.sync(site)


def _wrap_native_call(original):
    from engine.launch import kernel_name

    @functools.wraps(original)
    def counted(kernel, *args):
        _kernel(kernel_name(kernel), args)
        return original(kernel, *args)
    return counted


def _wrap_bound_call(original):
    @functools.wraps(original)
    def counted(self):
        _kernel(self.name, self.args)
        return original(self)
    return counted


def _wrap_sequence_call(original):
    @functools.wraps(original)
    def counted(self):
        for bound in self.launches:
            _kernel(bound.name, bound.args)
        return original(self)
    return counted


def _wrap_taichi(original, owner: str, method: str, syncs: bool):
    what = f"{owner}.{method.strip('_') if method.startswith('__') else method}"
    if method == "__getitem__":
        what = f"{owner} element read"
    elif method == "__setitem__":
        what = f"{owner} element write"

    @functools.wraps(original)
    def counted(*args, **kwargs):
        if _depth[0]:
            return original(*args, **kwargs)
        site = _site(what) if syncs else None
        for costs in _active:
            costs.data_ops += 1
            costs.data_op_names[what] += 1
            if site:
                costs.sync(site)
        _depth[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            _depth[0] -= 1
    return counted


def _wrap_sync(original):
    @functools.wraps(original)
    def counted(*args, **kwargs):
        if not _depth[0]:
            site = _site("ti.sync")
            for costs in _active:
                costs.sync(site)
        return original(*args, **kwargs)
    return counted


def _patch(owner: Any, name: str, wrapper) -> None:
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    _undo.append((owner, name, original))
    setattr(owner, name, wrapper)


def _install() -> None:
    import taichi as ti

    from engine import dispatch, launch

    _patch(launch, "native_call", _wrap_native_call(launch.native_call))
    _patch(dispatch.BoundLaunch, "__call__", _wrap_bound_call(dispatch.BoundLaunch.__call__))
    _patch(dispatch.LaunchSequence, "__call__", _wrap_sequence_call(dispatch.LaunchSequence.__call__))
    from engine.taichi_private import Field

    for cls in (Field, ti.ScalarField, ti.MatrixField, ti.StructField, ti.Ndarray, ti.ScalarNdarray,
                ti.VectorNdarray, ti.MatrixNdarray):  # Field: copy_from is the base class's
        owner = "field" if "Field" in cls.__name__ else "ndarray"
        for method, syncs in _TAICHI_METHODS.items():
            if method in vars(cls):
                _patch(cls, method, _wrap_taichi(vars(cls)[method], owner, method, syncs))
    _patch(ti, "sync", _wrap_sync(ti.sync))


def _uninstall() -> None:
    while _undo:
        owner, name, original = _undo.pop()
        setattr(owner, name, original)


@contextlib.contextmanager
def count_host_costs() -> Iterator[HostCosts]:
    """Count launches and host syncs while the block runs (module docstring); yields the `HostCosts`."""
    costs = HostCosts()
    if not _active:
        _install()
    _active.append(costs)
    try:
        yield costs
    finally:
        _active.remove(costs)
        if not _active:
            _uninstall()


class IterationCosts:
    """Per-iteration counts over a loop's iterations (some counted, `every`-th after the first `first`).

        costs = IterationCosts()
        for i in range(n):
            with costs.iteration(i):
                fit.step()
        costs.record()   # {"launches_per_iteration": 41, "host_syncs_per_iteration": 1, "host_costs": {...}}

    The per-iteration figures are the most common counts over the counted iterations (an iteration that re-sorts
    the BVH, or the first, which uploads and allocates, launches more); `host_costs` keeps how many counted
    iterations had each count and, for one iteration with the most common counts, where its launches and syncs
    came from. Counting only some iterations keeps its cost (a Python wrapper around each launch) off the others.
    """

    def __init__(self, first: int = 10, every: int = 10):
        self.first, self.every = first, every
        self.launches: collections.Counter = collections.Counter()
        self.syncs: collections.Counter = collections.Counter()
        self.examples: dict[tuple[int, int], HostCosts] = {}

    @contextlib.contextmanager
    def iteration(self, i: int) -> Iterator[None]:
        if i >= self.first and i % self.every:
            yield
            return
        with count_host_costs() as costs:
            yield
        self.add(costs)

    def add(self, costs: HostCosts) -> None:
        """Count one iteration that was counted elsewhere (a loop whose iterations are told apart only after they
        ran, e.g. `Recovery.steps`' phases)."""
        self.launches[costs.launches] += 1
        self.syncs[costs.host_syncs] += 1
        self.examples.setdefault((costs.launches, costs.host_syncs), costs)

    def record(self) -> dict:
        if not self.launches:
            return {"launches_per_iteration": None, "host_syncs_per_iteration": None, "host_costs": None}
        launches = self.launches.most_common(1)[0][0]
        syncs = self.syncs.most_common(1)[0][0]
        example = self.examples.get((launches, syncs))
        return {
            "launches_per_iteration": launches, "host_syncs_per_iteration": syncs,
            "host_costs": {
                "iterations_counted": sum(self.launches.values()), "counted": f"the first {self.first}, then every "
                f"{self.every}th", "launches": {str(k): v for k, v in sorted(self.launches.items())},
                "host_syncs": {str(k): v for k, v in sorted(self.syncs.items())},
                "typical_iteration": example.as_record() if example else None},
        }
