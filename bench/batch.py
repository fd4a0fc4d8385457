"""`python -m app bench batch [--jobs N] [--subdiv S] [--iters I] [--out DIR]`: N fits in one process vs through Ray.

The same N fit jobs (targets blob, torus, spot, blub in turn, seeds 0, 1, ...) run twice:
sequentially in this process (`app.batch.execute.run_job`, one after another, Taichi on every
core), then as a batch through an embedded Ray with one task per job, 1 CPU each, as many at once
as the machine has cores. Both sides run the job code a batch worker runs (Taichi restarted per
job, the quality measurement included); a first job, untimed, warms the offline kernel cache.
The answers are compared before any figure is printed: every job's losses bit for bit. The two
sides alternate for `--repeats` rounds; medians and ranges are reported.

Overhead per task: the task slots' time not spent inside a job, shared out per task:
(slots x Ray wall - sum of the jobs' own wall times) / N, with the Ray wall measured from the
first submission to the last result (Ray's start-up is shown on its own line).
"""
from __future__ import annotations

import json
import os
import statistics
import time

from bench import bench_parser, emit, machine_load
from engine.errors import UserError

TARGETS = ("blob", "torus", "spot", "blub")


def _jobs(n: int, subdiv: int, iters: int, arch: str, threads: int) -> list:
    from app.batch.jobs import Job

    return [Job("fit", f"{TARGETS[i % len(TARGETS)]}/seed{i // len(TARGETS)}",
                {"target": TARGETS[i % len(TARGETS)], "subdiv": subdiv, "iters": iters, "lr": 0.03, "smooth": None,
                 "smooth_end": None, "samples": None, "seed": i // len(TARGETS)}, arch, threads) for i in range(n)]


def _losses(result: dict) -> list[float]:
    if result["row"]["status"] != "ok":
        raise UserError(f"bench batch: job {result['row']['job']} failed: {result['row']['error']}")
    return json.loads(result["files"]["fit.json"])["losses"]


def main(argv: list[str]) -> int:
    parser = bench_parser("batch", __doc__)
    parser.add_argument("--jobs", type=int, default=8, help="fits per side (default 8)")
    parser.add_argument("--subdiv", type=int, default=2, help="icosphere subdivision (default 2)")
    parser.add_argument("--iters", type=int, default=100, help="iterations per fit (default 100)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of both sides (default 3)")
    options = parser.parse_args(argv)
    if min(options.jobs, options.iters, options.repeats) < 1:
        raise UserError("--jobs, --iters and --repeats must be at least 1")
    try:
        from app.batch.ray_session import RaySession
    except ImportError:
        raise UserError('bench batch needs Ray: pip install ".[batch]"') from None
    from app.batch.execute import run_job
    from engine.backend import requested_arch
    from engine.progress import bar

    arch = requested_arch(options.arch)
    if arch == "auto":  # decided once here rather than announced by every job
        from engine.backend import cuda_unavailable_reason

        arch = "cpu" if cuda_unavailable_reason() else "cuda"
    cores = os.cpu_count() or 1
    run_job(_jobs(1, options.subdiv, options.iters, arch, cores)[0])  # warm the offline cache, untimed

    seq_walls, ray_walls, ray_starts, seq_jobs, ray_jobs, overheads = [], [], [], [], [], []
    with bar(total=2 * options.repeats, desc="bench batch") as progress:
        for _ in range(options.repeats):  # the sides alternate: a busy machine weighs on both alike
            sequential = _jobs(options.jobs, options.subdiv, options.iters, arch, cores)
            started = time.perf_counter()
            here = [run_job(job) for job in sequential]
            seq_walls.append(time.perf_counter() - started)
            progress.update()
            there: dict[str, dict] = {}
            with RaySession(cpus=cores) as session:
                started = time.perf_counter()
                session.run(_jobs(options.jobs, options.subdiv, options.iters, arch, 1),
                            lambda job, result: there.__setitem__(job.name, result))
                ray_walls.append(time.perf_counter() - started)
                ray_starts.append(session.started_s)
            progress.update()
            for job, result in zip(sequential, here):
                if _losses(result) != _losses(there[job.name]):
                    raise UserError(f"bench batch: {job.name} gave other losses through Ray than in this process")
            seq_jobs += [r["row"]["wall_s"] for r in here]
            ray_jobs += [r["row"]["wall_s"] for r in there.values()]
            overheads.append((cores * ray_walls[-1] - sum(r["row"]["wall_s"] for r in there.values())) / options.jobs)

    def spread(values: list[float], digits: int = 1) -> str:
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

    seq_wall, ray_wall, ray_start = (statistics.median(v) for v in (seq_walls, ray_walls, ray_starts))
    lines = [f"arch {arch}; {options.jobs} fits ({', '.join(TARGETS)} in turn; subdivision {options.subdiv}, "
             f"{options.iters} iterations, Taichi restarted per job, quality measured); median (min-max) of "
             f"{options.repeats} alternating rounds; {machine_load()}",
             f"answers: every job's {options.iters} losses bit-identical in this process and through Ray",
             "", "| side | tasks at once x threads | batch wall (s) | one job's wall (s) | speed-up (median walls) |",
             "|---|---:|---:|---:|---:|",
             f"| sequential, one process | 1 x {cores} | {spread(seq_walls)} | {spread(seq_jobs, 2)} | 1.00x |",
             f"| Ray, embedded, 1 CPU per task | {cores} x 1 | {spread(ray_walls)} + start {spread(ray_starts)} | "
             f"{spread(ray_jobs, 2)} | {seq_wall / ray_wall:.2f}x ({seq_wall / (ray_wall + ray_start):.2f}x with start) |",
             "", f"overhead per task (slot time outside the job, per task): {spread(overheads, 2)} s; "
             f"Ray start once per batch"]
    emit("\n".join(lines), "batch", options.out)
    return 0
