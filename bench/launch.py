"""`python -m app bench launch [--arch A] [--launches N] [--repeats R] [--out DIR]`: launch overhead vs Warp.

A port of Warp's `benchmark_launches.py` methodology: six kernel shapes (k0 no
arguments, kf three floats, kv three vec3, km three mat33, ka three arrays, kz all
nine), each launched in two forms, 12 cells; N launches per cell (default 20,000),
dim 1, a warm-up of 100, the median of R (3) repetitions, wall clock around the
enqueue loop with synchronisation outside it. Warp runs the same 12 cells in the same
process on the same device, interleaved repetition by repetition with ours so both
see the same machine load.

What the two forms mean:
- `direct`: every launch passes its arguments. Warp: `wp.launch(kN, dim=1,
  inputs=[...])`. Ours: `native(kN)(*args)` (engine/dispatch.py), a drop-in for the
  plain call that writes each argument into a cached launch context and launches.
- `struct`: the arguments are packed once. Warp: a `wp.struct` built once, passed to
  `wp.launch(ksN, dim=1, inputs=[s])` every launch. Ours: `bind(kN, *args)` once,
  then `bound()` every launch (the arguments already sit in the launch context).
The plain Taichi call `kN(*args)` is timed per shape as well, so the gain is visible.
Direct calls with the same values let native dispatch skip rewriting them (engine/dispatch.py);
so the direct rows also show, informationally, the cost when every call brings new values
(two argument sets alternating; the arrays stay the same objects).
Informational, outside the 12 cells (struct rows): Warp's own prepared launch of the same
kernel with separate arguments, a command recorded once (`wp.launch(kN, ..., record_cmd=True)`)
and replayed with `.launch()`, the closest analogue of our binding.

Before timing, `echo` (a kernel that writes its arguments back) is launched plainly,
directly and bound, and each output must equal the arguments sent (engine/checks/dispatch_echo.py).
`--json PATH` also writes the cells, the table and its summary as JSON (the `launch_overhead`
claim reads them: it runs this command in a child process, so the app never imports bench/).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from bench import bench_parser, emit, machine_load
from engine.errors import UserError

SHAPES = ("k0", "kf", "kv", "km", "ka", "kz")
FORMS = ("direct", "struct")
WARMUP = 100
WARP_DEVICE = {"cpu": "cpu", "cuda": "cuda:0"}  # Warp has no Vulkan backend


@dataclass
class Cell:
    shape: str
    form: str
    native_us: float
    plain_us: float
    warp_us: float | None
    warp_recorded_us: float | None = None  # Warp's prepared `wp.Launch.launch()`: informational
    changing_us: float | None = None  # direct form with argument values changing every call

    @property
    def ratio(self) -> float | None:
        """Warp's time over ours: > 1 means native dispatch is faster."""
        return None if self.warp_us is None else self.warp_us / self.native_us


def _taichi_args(scale: float = 1.0, arrays: tuple | None = None) -> dict[str, tuple]:
    """Warp's argument values (times `scale`), as Taichi values (arrays: 1-element f32 ndarrays)."""
    import taichi as ti

    a, b, c = arrays or tuple(ti.ndarray(ti.f32, 1) for _ in range(3))
    x, y, z = 17.0 * scale, 42.0 * scale, 99.0 * scale
    u, v, w = (ti.math.vec3(1, 2, 3) * scale, ti.math.vec3(10, 20, 30) * scale,
               ti.math.vec3(100, 200, 300) * scale)
    zero = ti.math.mat3(0.0) + scale - 1.0
    return {"k0": (), "kf": (x, y, z), "kv": (u, v, w), "km": (zero, zero, zero),
            "ka": (a, b, c), "kz": (a, b, c, x, y, z, u, v, w)}


def _timed_changing(call, arg_sets: tuple[tuple, tuple], launches: int) -> float:
    """Like `_timed`, alternating two argument sets whose values differ, so every call writes them."""
    import taichi as ti

    first, second = arg_sets
    ti.sync()
    start = time.perf_counter()
    for _ in range(launches // 2):
        call(*first)
        call(*second)
    elapsed = time.perf_counter() - start
    ti.sync()
    return elapsed * launches / (2 * (launches // 2) or 1)


def validate() -> None:
    """Plain, native and bound launches of `echo` must deliver the arguments sent (engine/checks/dispatch_echo.py)."""
    from engine.checks.dispatch_echo import echo_mismatches, run_dispatch_echo

    wrong = echo_mismatches(run_dispatch_echo())
    if wrong:
        raise RuntimeError(f"native dispatch does not deliver the arguments: {'; '.join(wrong)}")


def _timed(call, args: tuple, launches: int) -> float:
    import taichi as ti

    ti.sync()
    start = time.perf_counter()
    for _ in range(launches):
        call(*args)
    elapsed = time.perf_counter() - start
    ti.sync()
    return elapsed


def measure(arch: str, launches: int, repeats: int = 3, use_warp: bool = True, progress=None) -> list[Cell]:
    """Time the 12 cells (Taichi already started on `arch`); Warp beside us when installed and able."""
    from engine.dispatch import bind, native
    from engine.kernels import launch_shapes

    validate()
    warp = None
    if use_warp and arch in WARP_DEVICE:
        try:
            from bench import launch_warp as warp
        except ImportError:
            warp = None
    device = WARP_DEVICE.get(arch)
    warp_cells = warp.cells(device) if warp else {}
    args = _taichi_args()
    changed = _taichi_args(2.0, args["ka"])  # other values, the same arrays
    cells = []
    for shape in SHAPES:
        kernel = getattr(launch_shapes, shape)
        plain_times: list[float] = []
        for form in FORMS:
            if form == "direct":
                call, call_args = native(kernel), args[shape]
            else:
                call, call_args = bind(kernel, *args[shape]), ()
            warp_entry = warp_cells.get((shape, form))
            # Warp's prepared launch of the same kernel with separate arguments: what our binding is.
            command = warp.recorded(*warp_cells[(shape, "direct")], device) if warp_entry and form == "struct" else None
            _timed(call, call_args, WARMUP)
            if form == "direct":
                _timed(kernel, args[shape], WARMUP)
            if warp_entry:
                warp.timed(*warp_entry, device, WARMUP)
                if command:
                    warp.timed_recorded(command, device, WARMUP)
            native_times, warp_times, recorded_times, changing_times = [], [], [], []
            for _ in range(repeats):
                native_times.append(_timed(call, call_args, launches))
                if form == "direct":
                    changing_times.append(_timed_changing(call, (args[shape], changed[shape]), launches))
                if warp_entry:
                    warp_times.append(warp.timed(*warp_entry, device, launches))
                    if command:
                        recorded_times.append(warp.timed_recorded(command, device, launches))
                if form == "direct":
                    plain_times.append(_timed(kernel, args[shape], launches))
                if progress:
                    progress.update(1)
            us = 1e6 / launches

            def median(times: list[float]) -> float | None:
                return statistics.median(times) * us if times else None

            cells.append(Cell(shape, form, median(native_times), median(plain_times), median(warp_times),
                              median(recorded_times), median(changing_times)))
    return cells


def table(cells: list[Cell], arch: str, launches: int, repeats: int) -> str:
    """A markdown table of the cells and a summary line."""
    import taichi as ti

    warp_version = _warp_version()
    head = (f"arch {arch}; {launches} launches/cell, dim 1, warm-up {WARMUP}, median of {repeats}; "
            f"taichi {'.'.join(map(str, ti.__version__))}, warp {warp_version or 'not installed'}; "
            f"{machine_load()}")
    rows = ["| kernel | form | Taichi plain call (us) | native dispatch (us) | Warp (us) | Warp / native | won "
            "| native, values changing (us) | Warp recorded cmd (us) |",
            "|---|---|---:|---:|---:|---:|:-:|---:|---:|"]
    for cell in cells:
        warp = "n/a" if cell.warp_us is None else f"{cell.warp_us:.2f}"
        ratio = "n/a" if cell.ratio is None else f"{cell.ratio:.1f}x"
        won = "" if cell.ratio is None else ("yes" if cell.ratio > 1 else "no")
        recorded = "n/a" if cell.warp_recorded_us is None else f"{cell.warp_recorded_us:.2f}"
        changing = "n/a" if cell.changing_us is None else f"{cell.changing_us:.3f}"
        rows.append(f"| {cell.shape} | {cell.form} | {cell.plain_us:.2f} | {cell.native_us:.3f} | {warp} | {ratio} "
                    f"| {won} | {changing} | {recorded} |")
    return "\n".join([head, "", *rows, "", summary(cells)])


def summary(cells: list[Cell]) -> str:
    compared = [cell for cell in cells if cell.ratio is not None]
    native = statistics.median(cell.native_us for cell in cells)
    plain = statistics.median(cell.plain_us for cell in cells)
    text = f"native median {native:.3f} us/launch, plain call median {plain:.2f} us ({plain / native:.0f}x)"
    if compared:
        won = sum(cell.ratio > 1 for cell in compared)
        text += (f"; Warp median {statistics.median(c.warp_us for c in compared):.2f} us; cells won "
                 f"{won}/{len(compared)}, min Warp/native ratio {min(c.ratio for c in compared):.1f}x")
        bound = [c for c in compared if c.warp_recorded_us is not None]
        faster = sum(c.native_us < c.warp_recorded_us for c in bound)
        text += f"; bound vs Warp's recorded command (informational): faster in {faster}/{len(bound)}"
    return text


def _warp_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("warp-lang")
    except Exception:  # not installed
        return None


def main(argv: list[str]) -> int:
    parser = bench_parser("launch", __doc__)
    parser.add_argument("--launches", type=int, default=20_000,
                        help="launches per cell and repetition (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="repetitions per cell (the median is reported; default %(default)s)")
    parser.add_argument("--no-warp", action="store_true", help="time native dispatch and plain calls only")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the cells, the table and its summary to PATH as JSON")
    options = parser.parse_args(argv)
    if options.launches < 1:
        raise UserError(f"--launches must be at least 1 (got {options.launches})")
    if options.repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {options.repeats})")

    from engine import backend
    from engine.progress import bar

    arch = backend.init(options.arch).name
    with bar(total=len(SHAPES) * len(FORMS) * options.repeats, desc="launch cells") as progress:
        cells = measure(arch, options.launches, options.repeats, not options.no_warp, progress)
    text = table(cells, arch, options.launches, options.repeats)
    emit(text, "launch", options.out)
    if options.json:
        from engine.atomic import write_json

        write_json(options.json, {"arch": arch, "cells": [asdict(cell) for cell in cells], "table": text,
                                  "summary": summary(cells)})
    return 0
