"""A run's output folder: checked before any work starts, owned by one run, holding one run's files.

`claim(path, command, patterns)` is called by every command that writes files, before
a backend starts (so a bad `--out` costs nothing):

- the folder must be creatable, a folder, writable (a probe file is created and removed:
  permission bits alone mislead under root) and have some free space;
- it is locked for the run (`flock` on `.shannon-run.json`, released by the kernel even when
  the process is killed); a second run into the same folder is refused naming the first
  run's pid;
- files an earlier run left there are removed: those matching the earlier run's patterns
  (recorded in `.shannon-run.json`, whichever command wrote them) and this command's own,
  so stale frames never sit beside a new result. Nothing else in the folder is touched.

`check_output_file(path, flag)` does the first check for a single output file (a screenshot).

    with claim("out/fit", "fit", ("fit.json", "final.*", "frames/iter_*.*")) as out:
        ...write out.path / "fit.json"...
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Iterable

from engine.errors import UserError

log = logging.getLogger(__name__)
MANIFEST = ".shannon-run.json"  # the lock, and the record of what the last run writes
MIN_FREE_BYTES = 1 << 20


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _existing_ancestor(path: Path) -> Path:
    for parent in (path, *path.parents):
        if os.path.lexists(parent):
            return parent
    return Path(".")


def check_folder(path: str | os.PathLike, flag: str = "--out", need_bytes: int = MIN_FREE_BYTES) -> Path:
    """Create `path` if needed and check it is a writable folder with `need_bytes` free; UserError naming `flag` if not."""
    folder = Path(path)
    label = f"{flag} {folder}"
    ancestor = _existing_ancestor(folder)
    if not ancestor.is_dir():
        what = "exists and is not a folder" if ancestor == folder else f"{ancestor} is not a folder"
        raise UserError(f"{label}: {what}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{label}: cannot create the folder ({_reason(exc)})") from None
    probe = folder / f".shannon-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"{label}: the folder is not writable ({_reason(exc)})") from None
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise UserError(f"{label}: only {free / 2**20:.1f} MiB free on its disk, the run needs about "
                        f"{need_bytes / 2**20:.1f} MiB")
    return folder


def check_output_file(path: str | os.PathLike, flag: str) -> Path:
    """Check that a file can be written at `path` (its folder is created); UserError naming `flag` if not."""
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{flag} {target}: is a folder, not a file name")
    check_folder(target.parent if str(target.parent) else Path("."), flag=f"{flag} {target}: folder")
    return target


class OutputDir:
    """An output folder owned by this run until `release()` (or the end of a `with` block)."""

    def __init__(self, path: Path, command: str, patterns: tuple[str, ...], fd: int):
        self.path = path
        self.command = command
        self.patterns = patterns
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the folder up (the manifest stays: the next run clears this run's files by it)."""
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "OutputDir":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_manifest(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    try:
        record = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _clear(folder: Path, patterns: Iterable[str]) -> int:
    """Remove the files matching `patterns` (relative globs) and the subfolders this leaves empty; how many files."""
    emptied: set[Path] = set()
    removed = 0
    for pattern in patterns:
        if not isinstance(pattern, str) or pattern.startswith(("/", ".")) or ".." in Path(pattern).parts:
            continue  # a manifest from elsewhere must not make us delete outside the folder
        for match in folder.glob(pattern):
            if match.is_file() or match.is_symlink():
                match.unlink()
                removed += 1
                emptied.update(parent for parent in match.parents if folder in parent.parents)
    for sub in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass  # not empty: it holds something that is not ours
    return removed


def claim(path: str | os.PathLike, command: str, patterns: Iterable[str], flag: str = "--out",
          need_bytes: int = MIN_FREE_BYTES) -> OutputDir:
    """Check, lock and clear the output folder for one run of `command` (see the module docstring)."""
    folder = check_folder(path, flag, need_bytes)
    patterns = tuple(patterns)
    manifest = folder / MANIFEST
    try:
        fd = os.open(manifest, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise UserError(f"{flag} {folder}: cannot create {MANIFEST} ({_reason(exc)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = _read_manifest(fd)
        os.close(fd)
        who = f"pid {other['pid']}, python -m app {other.get('command', '?')}" if "pid" in other else "pid unknown"
        raise UserError(f"{flag} {folder} is in use by another run ({who}): wait for it to finish or "
                        "choose another folder") from None
    try:
        earlier = _read_manifest(fd)
        removed = _clear(folder, (*earlier.get("patterns", ()), *patterns))
        record = json.dumps({"pid": os.getpid(), "command": command, "patterns": list(patterns)}, indent=2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (record + "\n").encode("utf-8"), 0)
    except OSError as exc:
        os.close(fd)
        raise UserError(f"{flag} {folder}: cannot clear an earlier run's files ({_reason(exc)})") from None
    if removed:
        log.info("cleared %d file(s) an earlier run left in %s/", removed, folder)
    log.debug("%s/ is locked for this run (pid %d)", folder, os.getpid())
    return OutputDir(folder, command, patterns, fd)
