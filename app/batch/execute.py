"""One batch job inside a worker process (a Ray worker, or this process for a sequential run).

    result = run_job(job)      # {"row": {...}, "files": {"fit.json": b"...", ...}, "log": ""}

Taichi in a reused worker process (Ray runs many tasks in one worker), measured on the cpu:

- **Set-up grows job after job unless Taichi restarts per job.** The fit's kernels take its
  fields as `ti.template()` arguments, so Taichi compiles one instance per set of fields, and a
  compiled instance is specialised on its fields' SNode ids. A second fit in the same Taichi
  program allocates new SNode trees, so every kernel is compiled again (set-up 1.4 s, then
  3.5-4.3 s for every later job), and the offline cache only lists those instances once the
  process writes it at exit, which a Ray worker never does (it ends with `os._exit`). Restarting
  Taichi after each job (`engine.backend.stop`, i.e. `ti.reset`) frees the job's fields, writes
  the cache there and then, and numbers the next job's SNodes from 0 again: the same kernels, the
  same cache keys, set-up flat at 1.2-2.3 s (docs/RESULTS.md has the figures).
- **One backend per worker.** Every job in a worker asks for the arch of the first job that started
  a backend there (a batch has one `--arch`); a job asking for another is refused as an error row.
- **Threads:** Taichi's CPU threads are capped at the task's `num_cpus` (`TI_CPU_MAX_NUM_THREADS`,
  read by `ti.init`), so parallel tasks do not oversubscribe the cores.
- **Offline cache:** Taichi's default cache folder (or `TI_OFFLINE_CACHE_FILE_PATH`) is per user,
  so every worker on a node shares it (Taichi locks it while writing): each kernel compiles once per node.
- **Quiet:** the job's progress bars and info lines are off (the `app` and `engine` loggers at
  warnings, which `engine.progress` follows); the batch has one bar.

The fit runs through the `fit` command's own code (`app.scenes.fit_run.run_fit_safely` on the
`FitSettings` that `fit` makes of the same flags) into a temporary folder whose files come back
as bytes, so the driver writes them on its own disk: a job folder is whole or absent, and no node
needs to share a filesystem with the driver. The target mesh comes the other way, as bytes
(`mesh`, shipped by app.batch.ray_session): the fit reads a copy in the task's own temp folder,
and its record and messages name the target as the user gave it, as `python -m app fit` does.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
import traceback
from pathlib import Path

from app.batch.jobs import Job, fit_settings, frame_path, invert_argv
from engine.errors import UserError

_worker_arch: str | None = None  # the arch this worker process runs: the first job's


def run_job(job: Job, mesh: bytes | str | None = None) -> dict:
    """Run `job` here; return its row (status, figures, pid, backend, wall time) and its output files.

    `mesh`: a fit's target file as bytes (the fit reads that copy), or why the driver could not read it.

    Never raises for a failed job: bad input (a broken mesh, a backend this node lacks) is an
    "error" row with the one-line message; an internal failure is an "error" row too, with the
    traceback in "log". Only the death of the process itself reaches Ray (which retries the task)."""
    global _worker_arch
    from engine import backend

    started = time.perf_counter()
    row: dict = {"job": job.name, "status": "error", "pid": os.getpid(), "backend": "", "error": ""}
    files: dict[str, bytes] = {}
    log = ""
    for name in ("app", "engine"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ["TI_CPU_MAX_NUM_THREADS"] = str(job.threads)
    try:
        if _worker_arch not in (None, job.arch):
            raise UserError(f"this worker runs --arch {_worker_arch}; a job asking for {job.arch} needs its own")
        with tempfile.TemporaryDirectory(prefix="shannon-job-") as folder:
            figures, outputs = fit_runner(job, Path(folder), mesh) if job.kind == "fit" else \
                RUNNERS[job.kind](job, Path(folder))
            log = figures.pop("log", "")
            row.update(figures)
            files = {name: (Path(folder) / name).read_bytes() for name in outputs}
    except UserError as exc:
        row["error"] = str(exc)
    except Exception as exc:  # a bug, not bad input: the row says so, the log keeps the traceback
        row["error"] = f"internal error: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        log = traceback.format_exc()
    finally:
        stopped = backend.stop()  # frees the job's fields and writes the offline cache now (see the module docstring)
        row["backend"] = stopped.name if stopped else ""
        if stopped is not None:  # a backend ran: this worker is now of that arch
            _worker_arch = job.arch
    row["wall_s"] = round(time.perf_counter() - started, 3)
    return {"row": row, "files": files, "log": log}


def fit_runner(job: Job, folder: Path, mesh: bytes | str | None = None) -> tuple[dict, list[str]]:
    """The `fit` command's run (`run_fit`) on the job's settings, into `folder`: the row's figures from
    fit.json, and the files the fit wrote (fit.json lists them; the folder's lock file is not one).

    With `mesh` the fit reads that copy of its target (under the target's file name, so the mesh's name
    and format are the same), and fit.json, the meshes' headers and any message name the target as given."""
    from app.batch.quality import surface_distance
    from app.scenes.fit_run import run_fit_safely
    from engine import atomic

    target = str(job.settings["target"])
    with tempfile.TemporaryDirectory(prefix="shannon-input-") as inputs:
        local = target
        if isinstance(mesh, str):
            raise UserError(f"mesh file {target}: {mesh}")
        if mesh is not None:
            local = str(Path(inputs) / Path(target).name)
            Path(local).write_bytes(mesh)
        result = run_fit_safely(fit_settings(dataclasses.replace(job, settings={**job.settings, "target": local})),
                                folder)
        record = result.record
        if "target" in record and local != target:  # the files were written: as `fit` on the given path writes them
            record["target"] = target
            atomic.write_json(folder / "fit.json", record)
            _name_the_target(folder, record["files"], local, target)
        if result.status == "error":
            message = result.message.replace(local, target)
            if "traceback" in record:  # a bug: the row says so, the log keeps the traceback
                return {"status": "error", "error": message, "log": record["traceback"]}, []
            raise UserError(message)
        row = {"status": result.status, "orders": record["orders"], "final_loss": record["final_loss"],
               "misses": record["misses"], "iterations": record["iterations_done"],
               **{key: record[key] for key in ("smooth", "smooth_end", "samples")}}  # the values the defaults gave
        if result.status == "diverged":
            row["error"] = f"diverged at iteration {record['diverged_at']}: {record['divergence']}"
        if result.status == "ok":
            row.update(surface_distance(local, folder / record["files"][0]))
        return row, record["files"]


def _name_the_target(folder: Path, files: list[str], local: str, target: str) -> None:
    """Name `target` instead of its shipped copy `local` in the fit's OBJ files (their one-line header comment,
    its whitespace collapsed as `engine.mesh_io.write_mesh` writes it; the other formats carry no header)."""
    old, new = (" ".join(text.split()).encode() for text in (local, target))
    for name in files:
        if name.endswith(".obj"):
            path = folder / name
            header, _, body = path.read_bytes().partition(b"\n")
            path.write_bytes(header.replace(old, new) + b"\n" + body)


def render_runner(job: Job, folder: Path) -> tuple[dict, list[str]]:
    """The job's frames of the robot-arm scene, written as `render --frames` writes them."""
    from app.scenes.robot_arm import scene_at
    from engine import backend, image_io
    from engine.render import Camera, Renderer

    backend.init(job.arch)
    settings = job.settings
    renderer = Renderer(settings["width"], settings["height"])
    for index, t, azimuth in settings["frames"]:
        camera = Camera(azimuth=azimuth, elevation=settings["elevation"], distance=settings["distance"])
        image_io.write_png(folder / frame_path(index), image_io.srgb8(renderer.render(scene_at(t), camera)),
                           text=image_io.png_edges_text("hard"))  # the forward renderer: `render`'s default edges
    return {"status": "ok", "frames": len(settings["frames"])}, [frame_path(index) for index, _, _ in settings["frames"]]


def invert_runner(job: Job, folder: Path) -> tuple[dict, list[str]]:
    """`python -m app invert`'s run on the job's flags, into `folder`: the row's figures from invert.json, and
    every file it wrote (invert.json, loss.png/.svg, progress.gif, frames/)."""
    from app.scenes.invert import run_in_folder

    from app.scenes.inverse_render import verdict_line

    record = run_in_folder(invert_argv(job.settings, job.arch, folder), folder)
    errors, verdict = record["errors"]["final"], record["verdict"]
    row = {"status": "ok" if record["status"] == "converged" else record["status"],  # the run's verdict
           "orders": record["image_loss"]["orders"], "final_loss": record["image_loss"]["final"],
           "joints_deg": errors["joints"], "letter": errors["letter"],
           "unidentifiable": " ".join(verdict["unidentifiable"]), "steps": record["steps"]}
    if record["status"] != "converged":
        row["error"] = verdict_line(verdict)
    return row, sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


RUNNERS = {"fit": fit_runner, "render": render_runner, "invert": invert_runner}  # kind -> runner(job, folder)
