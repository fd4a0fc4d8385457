"""`python -m app bench invert_sweep`: pose recovery over the timeline and seeds, each run's verdict against the truth.

    python -m app bench invert_sweep                              # t = 0.0, 0.1, ..., 1.0 x seeds 1-5, 256x128, cpu
    python -m app bench invert_sweep --frames 0.5 --seeds 1-2 --workers 2 --out out/sweep

Every run is `python -m app invert --t T --seed S` with the default perturbation (app.scenes.invert
.run_in_folder, in a worker process; `--workers` of them, each with Taichi's default threads),
its files under OUT/runs/. A run is `recovered` when every parameter the image determines is within
its tolerance (app.scenes.inverse_render.TOLERANCES). A `silent` failure is a run that did not
recover but says `converged`, or whose image-only verdict (the one a `--target-image` run would get)
says converged while the truth says otherwise: the sweep fails (exit 1) if there is any. Prints a
table per frame and a summary; exit 1 also when fewer than --goal of the runs recover.

A sweep takes about half an hour on 2 cores: run it from a checkout nobody edits meanwhile (a `git worktree` of
the commit), since Taichi re-reads a kernel's source when it compiles it, and a file edited under a running
sweep fails its next compile.
"""
from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench import bench_parser, emit, machine_load

DEFAULT_FRAMES = tuple(round(0.1 * k, 1) for k in range(11))
DEFAULT_SEEDS = (1, 2, 3, 4, 5)


def _parse_list(text: str, kind, flag: str) -> tuple:
    from engine.errors import UserError

    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            if kind is int and "-" in part[1:]:
                lo, hi = part.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            else:
                out.append(kind(part))
        except ValueError:
            raise UserError(f"{flag} '{part}': expected {'integers or ranges like 1-5' if kind is int else 'numbers'}")
    if not out:
        raise UserError(f"{flag}: give at least one value")
    return tuple(out)


def _worker_init(arch: str | None) -> None:
    # Each worker as a plain `invert` process: Taichi's default threads and pinning, whose kernels the offline
    # cache holds (its key holds the thread cap and the SNode ids; a capped worker compiled the whole
    # differentiable renderer again, minutes)
    from engine import backend

    backend.init(arch)


def _one_task(task: tuple) -> dict:
    return _one(*task)


def _one(t: float, seed: int, argv: list[str], folder: str) -> dict:
    """One inversion in this worker: its invert.json summarised (status, truth verdict, image verdict, wall time)."""
    from app.scenes.invert import run_in_folder
    from engine.errors import UserError

    started = time.perf_counter()
    try:
        record = run_in_folder(["--t", str(t), "--seed", str(seed), *argv], Path(folder))
    except UserError as exc:
        return {"t": t, "seed": seed, "status": "error", "error": str(exc), "wall_s": time.perf_counter() - started}
    verdict = record["verdict"]
    return {"t": t, "seed": seed, "status": record["status"], "recovered": verdict["truth_criterion"]["met"],
            "image_says_converged": verdict["image_criterion"]["met"], "off": verdict["off"],
            "unidentifiable": verdict["unidentifiable"], "wall_s": record["wall_s"], "steps": record["steps"],
            "errors": record["errors"]["final"]}


def main(argv: list[str]) -> int:
    parser = bench_parser("invert_sweep", __doc__)
    parser.add_argument("--frames", default=",".join(f"{t:g}" for t in DEFAULT_FRAMES), metavar="T,...",
                        help="timeline frames (default 0,0.1,...,1)")
    parser.add_argument("--seeds", default="1-5", metavar="S,...", help="perturbation seeds, e.g. 1-5 (default 1-5)")
    parser.add_argument("--width", type=int, default=256, help="pixels (default 256)")
    parser.add_argument("--height", type=int, default=128, help="pixels (default 128)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1)), metavar="N",
                        help="worker processes (default: one per core)")
    parser.add_argument("--goal", type=float, default=0.95, help="share of runs that must recover (default 0.95)")
    parser.add_argument("--invert-flags", default="", metavar="'FLAGS'",
                        help="extra `invert` flags for every run, e.g. '--iters 100' (default: none)")
    options = parser.parse_args(argv)
    from engine.errors import UserError

    frames = _parse_list(options.frames, float, "--frames")
    seeds = _parse_list(options.seeds, int, "--seeds")
    if options.workers < 1:
        raise UserError(f"--workers {options.workers}: at least 1")
    extra = ["--width", str(options.width), "--height", str(options.height), "--frame-every", "100000",
             *options.invert_flags.split()]
    from app.scenes.invert import checked_arguments

    checked_arguments(["--t", str(frames[0]), "--seed", str(seeds[0]), *extra])  # bad flags fail before any work
    root = Path(options.out) if options.out else Path(tempfile.mkdtemp(prefix="invert_sweep_"))
    from engine.progress import bar

    rows: list[dict] = []
    started = time.perf_counter()
    jobs = [(t, s) for t in frames for s in seeds]
    tasks = []
    for t, seed in jobs:
        folder = root / "runs" / f"t{t:g}_seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        tasks.append((t, seed, extra, str(folder)))
    # fresh interpreters (nothing of this process's Taichi state); leaving the with block early (Ctrl-C, or
    # SIGTERM, which app.cli turns into an exception) terminates the workers mid-run
    with multiprocessing.get_context("spawn").Pool(options.workers, _worker_init, (options.arch,)) as pool, \
            bar(total=len(jobs), desc="invert sweep") as progress:
        for row in pool.imap_unordered(_one_task, tasks):
            rows.append(row)
            progress.set_postfix_str(f"{sum(r.get('recovered', False) for r in rows)}/{len(rows)} recovered",
                                     refresh=False)
            progress.update()
        pool.close()  # the workers exit on their own, so Taichi writes what they compiled to its offline cache
        pool.join()
    wall = time.perf_counter() - started
    text, failed = _table(rows, frames, seeds, options, wall)
    emit(text, "invert_sweep", options.out)
    return 1 if failed else 0


def _table(rows: list[dict], frames, seeds, options, wall: float) -> tuple[str, bool]:
    rows = sorted(rows, key=lambda r: (r["t"], r["seed"]))
    silent = [r for r in rows if r["status"] == "converged" and not r.get("recovered")
              or r.get("image_says_converged") and not r.get("recovered")]
    lines = [f"## Pose recovery sweep: {len(frames)} frames x {len(seeds)} seeds, {options.width}x{options.height}, "
             f"{options.workers} worker processes sharing {os.cpu_count()} cores; {machine_load()}", "",
             "| t | recovered | not recovered (status: what is off) | unidentifiable | median wall s |",
             "|---|---|---|---|---|"]
    for t in frames:
        at = [r for r in rows if r["t"] == t]
        bad = [r for r in at if not r.get("recovered")]
        what = "; ".join(f"seed {r['seed']} {r['status']}: "
                         + (r.get("error") or ", ".join(f"{k} {v:.3g}" for k, v in list(r["off"].items())[:3]))
                         for r in bad) or "-"
        unid = sorted({name for r in at for name in r.get("unidentifiable", [])})
        lines.append(f"| {t:g} | {len(at) - len(bad)}/{len(at)} | {what} | {', '.join(unid) or '-'} | "
                     f"{statistics.median(r['wall_s'] for r in at):.1f} |")
    recovered = sum(bool(r.get("recovered")) for r in rows)
    share = recovered / max(len(rows), 1)
    walls = [r["wall_s"] for r in rows]
    lines += ["", f"summary: {recovered}/{len(rows)} recovered ({100 * share:.0f} %, goal {100 * options.goal:.0f} %); "
              f"{len(silent)} silent failures; every other run exits 1 naming what is off; wall per run median "
              f"{statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}); sweep {wall:.0f} s"]
    if silent:
        lines.append("silent: " + ", ".join(f"t {r['t']:g} seed {r['seed']}" for r in silent))
    return "\n".join(lines), bool(silent) or share < options.goal
