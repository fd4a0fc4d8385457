"""`python -m app batch fit|render|invert ...`: a folder of fits, a sweep of settings, a long render or many
inverse renderings as one command.

    python -m app batch fit --targets meshes/ --grid lr=0.01,0.03 seed=0..3 --out out/sweep [--report]
    python -m app batch render --t 0:1:240 --orbit --width 512 --height 256 --out out/orbit
    python -m app batch invert --grid seed=1..4 t=0.1,0.5 --out out/recoveries   # --grid starts=1,3 to compare
    python -m app batch fit ... --address HEAD:6379       # on a Ray cluster (or RAY_ADDRESS=HEAD:6379)

Each job is one Ray task (app.batch.ray_session); an invert job is `python -m app invert` with its
flags, its multi-start (`--starts`, default 3) included; without --address an embedded Ray runs on this
machine. Rerunning the same command skips finished jobs (`--force` redoes them); Ctrl-C keeps the
finished ones and marks the rest interrupted (exit 130). The table lands in OUT/batch.csv and
OUT/batch.json (app.batch.store). Limits: a batch of more than --max-jobs jobs (10,000 by default,
counted before any job is made) and a --cpus-per-task no node has (with a GPU, for a cuda job) are
refused in one line; --job-timeout S kills a job running longer (row status timed_out), and the
batch goes on. What Ray itself prints (a lost node's log dump, notices of retried tasks) goes to
OUT/ray.log, named in one summary line; the summary also says where Ray's ports listened. A cluster's
nodes get our code and the input meshes from the batch (Ray's runtime environment and object store):
they need Ray and the Python packages, not this checkout or the input folder. Exit codes: 0 every job
ok; 1 some job failed, diverged or timed out (its row says why); 2 bad input, no Ray, a request no
node meets, or a cluster that does not answer; 130 interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import math
import os
import time
from pathlib import Path
from typing import TextIO

from app.batch import jobs as job_specs
from app.batch import store
from app.scenes.fit_settings import LOSS_TERMS, RECOMMENDED_ITERS, RECOMMENDED_LR
from engine.errors import EXIT_OK, EXIT_RESULT_BAD, Interrupted, UserError

log = logging.getLogger(__name__)

RAY_LOG = "ray.log"  # in OUT: what Ray itself printed while the batch ran (app.batch.ray_session)
INSTALL_HINT = 'python -m app batch needs Ray: pip install ".[batch]" (from the project folder)'


def _common() -> argparse.ArgumentParser:
    from app.flags import add_arch_argument

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", required=True, metavar="DIR", help="output folder: jobs/, batch.csv, batch.json")
    add_arch_argument(common)
    ray_flags = common.add_argument_group("Ray")
    ray_flags.add_argument("--address", default=None, metavar="HOST:PORT",
                           help="join the Ray cluster whose head is there (default: $RAY_ADDRESS, else an embedded Ray)")
    ray_flags.add_argument("--cpus", type=int, default=None, help="CPUs of the embedded Ray (default: all)")
    ray_flags.add_argument("--cpus-per-task", type=int, default=1, metavar="N",
                           help="num_cpus of each task, and Taichi's CPU threads in it (default 1)")
    ray_flags.add_argument("--retries", type=int, default=2, help="times a task whose worker died is retried (default 2)")
    ray_flags.add_argument("--connect-timeout", type=float, default=60.0, metavar="S",
                           help="seconds to wait for a cluster to answer (default 60)")
    common.add_argument("--force", action="store_true", help="redo jobs a previous run finished")
    limits = common.add_argument_group("limits")
    limits.add_argument("--max-jobs", type=int, default=job_specs.MAX_JOBS, metavar="N",
                        help=f"refuse a batch of more jobs, counted before any is made (default {job_specs.MAX_JOBS:,})")
    limits.add_argument("--job-timeout", type=float, default=None, metavar="SECONDS",
                        help="stop a job that runs longer (its worker is killed; its row: timed_out; the batch goes "
                             "on), counted from when the job starts in its worker (default: no limit)")
    return common


def _parser() -> argparse.ArgumentParser:
    from app.flags import OneLineParser, add_verbosity_arguments, command_parser

    parser = command_parser("batch", __doc__)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="fit|render|invert", parser_class=OneLineParser)
    common = _common()
    fit = kinds.add_parser("fit", parents=[common], help="shape fits: targets x a settings grid",
                           description="One `python -m app fit` per target and grid point.")
    fit.add_argument("--targets", nargs="+", required=True, metavar="DIR_OR_GLOB",
                     help="mesh folders, globs, files or built-in target names")
    fit.add_argument("--grid", nargs="+", default=[], metavar="KEY=V1,V2",
                     help=f"settings to sweep: {', '.join(job_specs.FIT_KEYS)}; integers also as a..b (seed=0..3)")
    settings = fit.add_argument_group("fit settings", "as for `python -m app fit`; --grid overrides them")
    settings.add_argument("--subdiv", type=int, default=3, help="(default 3)")
    settings.add_argument("--iters", type=int, default=RECOMMENDED_ITERS, help=f"(default {RECOMMENDED_ITERS})")
    settings.add_argument("--lr", type=float, default=RECOMMENDED_LR, help=f"(default {RECOMMENDED_LR})")
    settings.add_argument("--smooth", type=float, default=None, help="(default: the recommended schedule)")
    settings.add_argument("--smooth-end", type=float, default=None,
                          help="smoothing weight at the last iteration (default: the recommended schedule)")
    settings.add_argument("--samples", type=int, default=None, help="(default: the fit's)")
    settings.add_argument("--seed", type=int, default=0, help="(default 0)")
    for term in LOSS_TERMS:
        settings.add_argument(f"--{term.name}-weight", type=float, default=None, metavar="W",
                              help=f"the {term.name} term's weight in the loss (default {term.weight:g})")
    fit.add_argument("--report", action="store_true", help="also write OUT/report.png: quality against each swept setting")
    render = kinds.add_parser("render", parents=[common], help="frames of the robot-arm scene, split into tasks",
                              description="Frames of `python -m app render`, split into tasks.")
    render.add_argument("--t", default="0:1:240", metavar="START:STOP:COUNT", help="times on the timeline (default 0:1:240)")
    render.add_argument("--orbit", action="store_true", help="turn the camera once around the scene over the frames")
    render.add_argument("--frames-per-task", type=int, default=8, metavar="K", help="frames per task (default 8)")
    render.add_argument("--width", type=int, default=2048, help="pixels (default %(default)s)")
    render.add_argument("--height", type=int, default=1024, help="pixels (default %(default)s)")
    render.add_argument("--azimuth", type=float, default=None,
                        help="camera, degrees; with --orbit the first frame's (default: render's)")
    render.add_argument("--elevation", type=float, default=None, help="camera, degrees (default: render's)")
    render.add_argument("--distance", type=float, default=None, help="camera distance (default: render's)")
    invert = kinds.add_parser("invert", parents=[common], help="inverse renderings: a grid of seeds, times, settings",
                              description="One `python -m app invert` (a rendered target) per grid point.")
    invert.add_argument("--grid", nargs="+", default=[], metavar="KEY=V1,V2",
                        help=f"settings to sweep: {', '.join(job_specs.INVERT_KEYS)}; integers also as a..b (seed=1..4)")
    flags = invert.add_argument_group("invert settings", "as for `python -m app invert` (its defaults); --grid "
                                                         "overrides them")
    for flag in job_specs.INVERT_FLAGS:
        flags.add_argument(f"--{flag.replace('_', '-')}", dest=flag, default=None,
                           type=job_specs.INVERT_KEYS.get(flag, int if flag in ("width", "height") else str),
                           help="as `invert`'s (default: its default)")
    for kind in (fit, render, invert):
        add_verbosity_arguments(kind, default=argparse.SUPPRESS)
    return parser


def _fit_jobs(args: argparse.Namespace, arch: str) -> list[job_specs.Job]:
    targets = job_specs.find_targets(args.targets)
    grid = job_specs.parse_grid(args.grid, per_point=len(targets), max_jobs=args.max_jobs)  # counted, then made
    base = {key: getattr(args, key) for key in job_specs.FIT_KEYS}
    jobs = job_specs.fit_jobs(targets, grid, base, arch, args.cpus_per_task)
    checked = set()
    for job in jobs:  # each distinct grid point once, as `fit` checks its flags (targets are the jobs' business)
        point = tuple(job.settings[key] for key in job_specs.FIT_KEYS)
        if point not in checked:
            checked.add(point)
            job_specs.fit_settings(job).validate()
    args.grid_values = grid
    return jobs


def _render_jobs(args: argparse.Namespace, arch: str) -> list[job_specs.Job]:
    from app.flags import OneLineParser
    from app.scenes import render_cli
    from engine.render import Camera

    if args.frames_per_task < 1:
        raise UserError(f"--frames-per-task must be at least 1, got {args.frames_per_task}")
    times = job_specs.parse_timeline(args.t)
    if (tasks := -(-len(times) // args.frames_per_task)) > args.max_jobs:
        raise job_specs.too_many_jobs(tasks, f"{len(times):,} frames, {args.frames_per_task} per task", args.max_jobs,
                                      "render fewer frames or more per task")
    defaults = Camera()
    camera = {"azimuth": defaults.azimuth if args.azimuth is None else args.azimuth,
              "elevation": defaults.elevation if args.elevation is None else args.elevation,
              "distance": defaults.distance if args.distance is None else args.distance}
    # the render command's own checks (size, camera, backend), on its flags for the first frame
    single = OneLineParser(prog="python -m app batch render")
    render_cli.add_arguments(single)
    render_cli._validate(single.parse_args(["--t", str(times[0]), "--width", str(args.width), "--height", str(args.height),
                                            "--arch", arch, *(f"--{k}={v}" for k, v in camera.items())]))
    args.grid_values = {}
    return job_specs.render_jobs(times, args.orbit, camera, (args.width, args.height), args.frames_per_task, arch,
                                 args.cpus_per_task)


def _invert_jobs(args: argparse.Namespace, arch: str) -> list[job_specs.Job]:
    from app.scenes.invert import checked_arguments

    grid = job_specs.parse_grid(args.grid, job_specs.INVERT_KEYS, max_jobs=args.max_jobs)
    base = {key: getattr(args, key) for key in job_specs.INVERT_FLAGS}
    jobs = job_specs.invert_jobs(grid, base, arch, args.cpus_per_task)
    for job in jobs:  # as `invert` checks its flags, before anything starts
        checked_arguments(job_specs.invert_argv(job.settings, arch, "-"))
    args.grid_values = grid
    return jobs


def _lock(out: Path) -> TextIO:
    """Hold OUT/.batch.lock for this run: a second batch into the same folder is refused."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = open(out / ".batch.lock", "a+")
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write there ({exc.strerror or type(exc).__name__})") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise UserError(f"--out {out} is in use by another batch (pid {holder})") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:  # Ray is the optional `batch` extra: imported here, by this command only
        from app.batch import ray_session  # noqa: F401
    except ImportError as exc:
        if exc.name != "ray":
            raise
        raise UserError(INSTALL_HINT) from None
    from engine.backend import requested_arch

    for flag in ("cpus", "cpus_per_task"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.retries < 0 or args.connect_timeout <= 0:
        raise UserError("--retries must be 0 or more and --connect-timeout positive")
    if args.max_jobs < 1:
        raise UserError(f"--max-jobs must be at least 1, got {args.max_jobs}")
    if args.job_timeout is not None and not 0 < args.job_timeout < math.inf:
        raise UserError(f"--job-timeout must be a positive number of seconds, got {args.job_timeout:g}")
    if args.address is None and not os.environ.get("RAY_ADDRESS") and args.cpus is not None \
            and args.cpus_per_task > args.cpus:
        raise UserError(f"--cpus-per-task {args.cpus_per_task}: more than the embedded Ray's --cpus {args.cpus}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    arch = requested_arch(args.arch)
    jobs = {"fit": _fit_jobs, "render": _render_jobs, "invert": _invert_jobs}[args.kind](args, arch)
    made = [path for path in (out, out / ".batch.lock", out / RAY_LOG) if not path.exists()]  # what a refused batch takes back
    lock = _lock(out)
    try:
        return _run(args, argv, out, jobs)
    except UserError:  # refused before any job ran (a request no node can meet): leave no trace of this run
        for path in reversed(made):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:  # not empty after all: keep it
                pass
        raise
    finally:
        lock.close()


def _run(args: argparse.Namespace, argv: list[str], out: Path, jobs: list[job_specs.Job]) -> int:
    from engine.progress import bar

    started = time.perf_counter()
    done = {} if args.force else {job.name: row for job in jobs if (row := store.done_row(out, job))}
    todo = [job for job in jobs if job.name not in done]
    results: dict[str, dict] = {}
    where: dict = {"mode": "none: every job was done before", "nodes": 0}
    interrupted: Interrupted | None = None  # SIGINT/SIGTERM raise it (app.cli); KeyboardInterrupt outside the CLI
    if todo:
        from app.batch.ray_session import RaySession

        session = RaySession(args.address, args.cpus, args.connect_timeout, log=out / RAY_LOG)
        progress = None
        slots = 1

        def on_result(job: job_specs.Job, result: dict) -> None:
            results[job.name] = store.save(out, job, result)
            progress.update(1)
            if progress.disable and log.isEnabledFor(logging.INFO):
                # no bar (stderr is not a terminal: a log, CI, a cluster's job runner): a line a job, on the
                # console (stderr itself is Ray's log file while the session is up)
                tally = store.counts(list(results.values()))
                print(f"batch {args.kind}: {len(results)} of {len(todo)} done: {job.name} "
                      f"{results[job.name]['status']} (ok {tally['ok']}, failed {len(results) - tally['ok']})",
                      file=session.console)

        def on_wait(in_flight: int) -> None:
            tally = store.counts(list(results.values()))
            progress.set_postfix_str(f"ok {tally['ok']}, failed {len(results) - tally['ok']}, "
                                     f"running {min(in_flight, slots)}")

        try:
            with session:
                session.check_feasible(todo[0], args.retries)  # a request no node meets: one line, not a hang
                resources = session.resources()
                slots = max(int(resources["CPU"] // args.cpus_per_task), 1)
                where = {"mode": session.mode, "address": session.address, **resources,
                         "ray_start_s": round(session.started_s, 3)}
                with contextlib.redirect_stderr(session.console):  # `bar` draws on sys.stderr: the console's
                    progress = bar(total=len(todo), desc=f"batch {args.kind}")
                try:
                    session.run(todo, on_result, args.retries, on_wait, args.job_timeout)
                finally:
                    progress.close()
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = exc if isinstance(exc, Interrupted) else Interrupted("SIGINT")
        where.update({"ended_leftover_pids": session.leftovers, "token_auth": session.token_auth,
                      "ports": session.ports, "exposure": session.exposure(),
                      "log": RAY_LOG if session.log_lines else None, "log_lines": session.log_lines})
    rows = [done.get(job.name) or results.get(job.name)
            or store.not_run_row(job, "not run: the batch was interrupted; rerun the command to finish it")
            for job in jobs]
    tally = store.counts(rows)
    summary = {"command": "python -m app batch " + " ".join(argv),
               "kind": args.kind, "jobs": len(jobs), "counts": tally, "resumed": len(done),
               "interrupted": interrupted.signal_name if interrupted else None,
               "wall_s": round(time.perf_counter() - started, 3), "ray": where}
    if args.kind == "fit" and args.grid_values:
        summary["winners"] = store.winners(rows, args.grid_values)
    store.write_table(out, args.kind, rows, summary)
    _print_summary(args, out, rows, summary)
    if args.kind == "fit" and getattr(args, "report", False):
        from app.batch.report import write_report

        write_report(out / "report.png", rows, args.grid_values)
        print(f"wrote {out}/report.png")
    if interrupted:
        raise Interrupted(interrupted.signal_name, f"{tally['ok']} jobs ok and kept, {tally['interrupted']} not run; "
                                                   "rerun the command to finish")
    return EXIT_OK if tally["ok"] == len(jobs) else EXIT_RESULT_BAD


def _print_summary(args: argparse.Namespace, out: Path, rows: list[dict], summary: dict) -> None:
    tally, where = summary["counts"], summary["ray"]
    place = (f"{where['mode']} Ray, {where.get('nodes', 0)} node(s), {where.get('CPU', 0):g} CPUs, "
             f"{'started' if where['mode'] == 'embedded' else 'joined'} in {where.get('ray_start_s', 0):.1f} s"
             if "CPU" in where else where["mode"])
    print(f"batch {args.kind}: {len(rows)} jobs: " + ", ".join(f"{n} {status}" for status, n in tally.items())
          + f" ({summary['resumed']} done before) in {summary['wall_s']:.1f} s ({place}) -> {out}/batch.csv")
    if where.get("exposure"):
        print(f"  {where['exposure']}")
    if where.get("log_lines"):
        print(f"  Ray's own messages ({where['log_lines']} lines) -> {out}/{where['log']}")
    for row in rows:
        if row["status"] in ("error", "diverged", "not_converged", "timed_out"):
            print(f"  {row['status']:<8} {row['job']}: {row.get('error', '')}")
    if tally["interrupted"]:
        print(f"  interrupted: {tally['interrupted']} jobs not run or not finished; rerun the command to finish them")
    for target, best in summary.get("winners", {}).items():
        settings = " ".join(f"{k}={v}" for k, v in best["settings"].items())
        print(f"  best for {target}: {settings} (chamfer {best['chamfer']:.3e}, hausdorff {best['hausdorff']:.3f}, "
              f"{best['orders']:.2f} orders) -> {out}/jobs/{best['job']}")
