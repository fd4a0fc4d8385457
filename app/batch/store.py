"""A batch's files: job folders written whole or not at all, what a rerun can skip, and the table.

    OUT/jobs/<job name>/      a fit job: fit.json, final.obj, loss.png (what `fit` writes) and job.json (its row)
    OUT/jobs/<job name>/      an invert job: invert.json, loss.png, progress.gif, frames/ (what `invert` writes), job.json
    OUT/frames/frame_NNNN.png a render job's frames (what `render --frames` writes); its row in OUT/jobs/<name>/job.json
    OUT/logs/<job>.txt        the traceback of a job that failed inside our code (its row names the file)
    OUT/batch.csv             one row per job: settings, status, figures, wall time, node (address and Ray's id),
                              pid, backend, error
    OUT/batch.json            the summary: command, counts by status, where it ran, the winners, every row
    OUT/ray.log               what Ray itself printed while a run was up (app.batch.ray_session), if anything

A job folder is assembled beside its place under a hidden name and renamed into place, so it is
whole or absent; a rerun counts a job done when its folder holds a job.json of the same settings
with status ok or diverged (and, for frames, every frame file). Rows with status error,
timed_out (stopped at --job-timeout) or interrupted are run again.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

from app.batch.jobs import FIT_KEYS, INVERT_KEYS, Job, fit_argv, frame_path, invert_argv
from engine import atomic
from engine.errors import UserError

DONE = ("ok", "diverged", "not_converged")  # a rerun keeps these (each is a run's verdict); the others run again
STATUSES = ("ok", "error", "diverged", "not_converged", "timed_out", "interrupted")
COLUMNS = {
    "fit": ["job", "target", *FIT_KEYS, "status", "orders", "final_loss", "chamfer", "hausdorff", "misses",
            "iterations", "wall_s", "node", "node_id", "pid", "backend", "error", "resumed", "folder", "command"],
    "render": ["job", "frames", "t_first", "t_last", "status", "wall_s", "node", "node_id", "pid", "backend", "error",
               "resumed", "folder"],
    "invert": ["job", *INVERT_KEYS, "status", "orders", "final_loss", "joints_deg", "letter", "unidentifiable", "steps",
               "wall_s",
               "node", "node_id", "pid", "backend", "error", "resumed", "folder", "command"],
}


def job_folder(out: Path, job: Job) -> Path:
    """OUT/jobs/<job name>: always inside OUT/jobs (the names are made safe in app.batch.jobs; checked here)."""
    parts = Path(job.name).parts
    if not parts or any(part in (".", "..") or part.startswith(".") for part in parts) or Path(job.name).is_absolute():
        raise ValueError(f"job name {job.name!r} would name a folder outside {out / 'jobs'}")
    return out / "jobs" / job.name


def _same(a: dict, b: dict) -> bool:
    return json.loads(json.dumps(a)) == json.loads(json.dumps(b))  # tuples and lists alike


def done_row(out: Path, job: Job) -> dict | None:
    """The stored row of `job` if a previous run finished it (see the module docstring), else None.

    A finished job with other settings is an error: a rerun with other non-grid flags would
    otherwise keep results that no longer match the command."""
    path = job_folder(out, job) / "job.json"
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if stored.get("status") not in DONE:
        return None
    if not _same(stored.get("settings", {}), job.settings) or stored.get("arch") != job.arch:
        raise UserError(f"{path.parent} holds this job run with other settings or --arch: "
                        f"use --force to redo it, or another --out")
    if job.kind == "render" and not all((out / frame_path(f[0])).is_file() for f in job.settings["frames"]):
        return None
    return {**stored["row"], "resumed": True}


def _replace_folder(folder: Path, files: dict[str, bytes]) -> None:
    """Write `files` (relative path -> bytes) as `folder`, whole: built under a hidden name, then renamed."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = folder.with_name(f".{folder.name}.building-{os.getpid()}")
    old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    for name, data in files.items():
        (building / name).parent.mkdir(parents=True, exist_ok=True)
        (building / name).write_bytes(data)
    if folder.exists():
        folder.rename(old)
    building.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def save(out: Path, job: Job, result: dict) -> dict:
    """Write a finished job's files and row; return the row as the table shows it."""
    if job.kind == "fit":  # the job's settings, where the run did not report the values it used
        row = {"target": job.settings["target"], **{k: job.settings.get(k) for k in FIT_KEYS},
               "command": "python -m app fit " + " ".join(fit_argv(job.settings, job.arch, job_folder(out, job)))}
    elif job.kind == "invert":
        row = {**{k: job.settings.get(k) for k in INVERT_KEYS},
               "command": "python -m app invert " + " ".join(invert_argv(job.settings, job.arch, job_folder(out, job)))}
    else:
        times = [t for _, t, _ in job.settings["frames"]]
        row = {"frames": len(times), "t_first": times[0], "t_last": times[-1]}
    row = {**row, **result["row"], "folder": str(job_folder(out, job).relative_to(out))}
    if result.get("log"):
        log = out / "logs" / f"{job.name.replace('/', '__')}.txt"
        atomic.write_text(log, result["log"])
        row["error"] += f" (traceback in {log})"
    files = result["files"]
    if job.kind == "render":
        for name, data in files.items():
            atomic.write_bytes(out / name, data)
        files = {}
    record = {"job": job.name, "kind": job.kind, "arch": job.arch, "settings": job.settings,
              "status": row["status"], "row": row}
    _replace_folder(job_folder(out, job), {**files, "job.json": (json.dumps(record, indent=2) + "\n").encode()})
    return row


def not_run_row(job: Job, reason: str) -> dict:
    return {"job": job.name, "status": "interrupted", "error": reason}


def write_table(out: Path, kind: str, rows: list[dict], summary: dict) -> None:
    """OUT/batch.csv (COLUMNS[kind], one row per job) and OUT/batch.json (summary + rows), atomically."""
    text = io.StringIO()
    writer = csv.DictWriter(text, COLUMNS[kind], extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
    atomic.write_text(out / "batch.csv", text.getvalue())
    atomic.write_json(out / "batch.json", {**summary, "rows": rows})


def counts(rows: list[dict]) -> dict[str, int]:
    return {status: sum(row["status"] == status for row in rows) for status in STATUSES}


def winners(rows: list[dict], grid: dict[str, list]) -> dict[str, dict]:
    """Per target, the ok row with the smallest `chamfer` (see app.batch.quality) and its grid settings."""
    best: dict[str, dict] = {}
    for row in rows:
        if row["status"] == "ok" and (row["target"] not in best or row["chamfer"] < best[row["target"]]["chamfer"]):
            best[row["target"]] = row
    return {target: {"settings": {k: row[k] for k in grid}, "job": row["job"], "chamfer": row["chamfer"],
                     "hausdorff": row["hausdorff"], "orders": row["orders"]} for target, row in best.items()}
