"""A run's output folder: checked before any work starts, owned by one run, holding one run's files.

`claim(path, command, patterns)` is called by every command that writes files, before
a backend starts (so a bad `--out` costs nothing):

- the folder must be creatable, a folder, writable (a probe file is created and removed:
  permission bits alone mislead under root) and have some free space;
- it is locked for the run (`flock` on `.shannon-run.json`, released by the kernel even when
  the process is killed); a second run into the same folder is refused naming the first
  run's pid;
- the files the earlier run wrote there are removed, so stale frames never sit beside a new
  result. Only those: every file this program writes goes through `engine.atomic`, which
  tells the folder's owner (`note_written`), and the owner appends a line to `.shannon-run.json`
  at once (its path inside the folder, size, mtime and inode), so even a killed run's files are
  known. A file is removed only if it still is exactly the one recorded (same size, mtime,
  inode: a file the user replaced or edited is theirs), never through a symlink (each folder
  on the way is opened with O_NOFOLLOW), never outside the folder, and never by a pattern
  (a manifest's `patterns`, from older versions or written by hand, delete nothing). Files
  matching this command's `patterns` that nobody recorded are left, with a warning.

`check_output_file(path, flag)` does the first check for a single output file (a screenshot).

    with claim("out/fit", "fit", ("fit.json", "final.*", "frames/iter_*.*")) as out:
        ...atomic.write_json(out.path / "fit.json", ...)   # recorded in out/.shannon-run.json
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat
import threading
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

    def __init__(self, path: Path, command: str, patterns: tuple[str, ...], fd: int, offset: int):
        self.path = path
        self.command = command
        self.patterns = patterns
        self._fd: int | None = fd
        self._offset = offset  # where the next record goes in the manifest
        self._root = Path(os.path.abspath(path))
        self._real = self._root.resolve()
        self._lock = threading.Lock()
        with _owned_lock:
            _owned.append(self)

    def note(self, target: Path) -> bool:
        """Record `target` in the manifest if it is a regular file inside this folder, reached without a symlink.

        Called by `engine.atomic` after each write (see the module docstring); True if recorded."""
        absolute = Path(os.path.abspath(target))
        try:
            relative = absolute.relative_to(self._root)
        except ValueError:
            return False
        try:
            if not relative.parts or absolute.parent.resolve() != self._real.joinpath(*relative.parts[:-1]):
                return False  # written through a symlinked folder: not ours to remove later
            info = os.lstat(absolute)
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode):
            return False
        line = (json.dumps({"file": relative.as_posix(), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
                            "ino": info.st_ino, "dev": info.st_dev}) + "\n").encode("utf-8")
        with self._lock:
            if self._fd is None:
                return False
            try:
                written = os.pwrite(self._fd, line, self._offset)
            except OSError:
                written = 0
            if written != len(line):  # a full disk: leave no half line (the file stays, unrecorded: kept next time)
                try:
                    os.ftruncate(self._fd, self._offset)
                except OSError:
                    pass
                log.debug("could not record %s in %s", relative, MANIFEST)
                return False
            self._offset += written
        return True

    def release(self) -> None:
        """Give the folder up (the manifest stays: the next run clears this run's files by it)."""
        with _owned_lock:
            if self in _owned:
                _owned.remove(self)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # closing drops the flock
                self._fd = None

    def __enter__(self) -> "OutputDir":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_owned: list[OutputDir] = []  # the folders this process holds now
_owned_lock = threading.Lock()


def note_written(path: str | os.PathLike) -> None:
    """A file was just written at `path` (engine.atomic calls this): the folder holding it, if claimed here, records it."""
    with _owned_lock:
        owners = sorted(_owned, key=lambda owner: len(owner._root.parts), reverse=True)  # the innermost folder's
    for owner in owners:
        if owner.note(Path(path)):
            return


def _read_manifest(fd: int) -> tuple[dict, list[dict]]:
    """The manifest's run record (pid, command) and the file records after it; unreadable parts are ignored.

    Its first line is the run's JSON record, each further line one written file's; an older manifest (one
    indented JSON object) has no file records."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    text = data.decode("utf-8", errors="replace")
    try:
        whole = json.loads(text) if text.strip() else {}
        return (whole if isinstance(whole, dict) else {}), []
    except json.JSONDecodeError:
        pass
    lines = text.splitlines()
    try:
        head = json.loads(lines[0])
    except (json.JSONDecodeError, IndexError):
        head = {}
    entries = []
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill or a full disk
        if isinstance(entry, dict):
            entries.append(entry)
    return (head if isinstance(head, dict) else {}), entries


_IDENTITY = ("size", "mtime_ns", "ino", "dev")


def _recorded(entries: list[dict]) -> dict[tuple[str, ...], tuple]:
    """{path parts: (size, mtime_ns, ino, dev)} of the well-formed file records, the last one per path."""
    files: dict[tuple[str, ...], tuple] = {}
    for entry in entries:
        name = entry.get("file")
        identity = tuple(entry.get(key) for key in _IDENTITY)
        if not isinstance(name, str) or not all(type(value) is int for value in identity):
            continue
        parts = tuple(name.split("/"))
        if not name or name.startswith("/") or any(part in ("", ".", "..") or "\0" in part for part in parts):
            continue  # not a path inside the folder
        files[parts] = identity
    return files


def _remove_recorded(folder: Path, files: dict[tuple[str, ...], tuple]) -> int:
    """Remove each recorded file that is still exactly the one recorded, reached from `folder` without following a
    symlink; then the subfolders this leaves empty. How many files were removed."""
    removed = 0
    emptied: set[tuple[str, ...]] = set()
    root = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for parts, identity in files.items():
            where = _open_folder(root, parts[:-1])
            if where is None:
                continue
            try:
                info = os.stat(parts[-1], dir_fd=where, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and (info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev) == identity:
                    os.unlink(parts[-1], dir_fd=where)
                    removed += 1
                    emptied.update(parts[:depth] for depth in range(1, len(parts)))
            except FileNotFoundError:
                pass
            finally:
                if where != root:
                    os.close(where)
        for sub in sorted(emptied, key=len, reverse=True):
            parent = _open_folder(root, sub[:-1])
            if parent is None:
                continue
            try:
                os.rmdir(sub[-1], dir_fd=parent)  # a symlink is not removed (ENOTDIR), a folder only when empty
            except OSError:
                pass  # not empty: it holds something that is not ours
            finally:
                if parent != root:
                    os.close(parent)
    finally:
        os.close(root)
    return removed


def _open_folder(root: int, parts: tuple[str, ...]) -> int | None:
    """A descriptor of the folder `parts` below `root`, each step opened without following a symlink; None if not."""
    fd = root
    for part in parts:
        try:
            step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:  # missing, not a folder, or a symlink (ELOOP)
            step = None
        if fd != root:
            os.close(fd)
        if step is None:
            return None
        fd = step
    return fd


def _unrecorded(folder: Path, patterns: Iterable[str], limit: int = 1000) -> list[str]:
    """Files matching this command's `patterns` that no run recorded (at most `limit`): kept, and warned about."""
    found: list[str] = []
    for pattern in patterns:
        if pattern.startswith(("/", ".")) or ".." in Path(pattern).parts:
            continue
        for match in folder.glob(pattern):
            if match.is_file():
                found.append(match.relative_to(folder).as_posix())
                if len(found) >= limit:
                    return found
    return found


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
        other, _ = _read_manifest(fd)
        os.close(fd)
        who = f"pid {other['pid']}, python -m app {other.get('command', '?')}" if "pid" in other else "pid unknown"
        raise UserError(f"{flag} {folder} is in use by another run ({who}): wait for it to finish or "
                        "choose another folder") from None
    try:
        _, entries = _read_manifest(fd)
        removed = _remove_recorded(folder, _recorded(entries))
        record = (json.dumps({"pid": os.getpid(), "command": command, "patterns": list(patterns)}) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    except OSError as exc:
        os.close(fd)
        raise UserError(f"{flag} {folder}: cannot clear an earlier run's files ({_reason(exc)})") from None
    if removed:
        log.info("cleared %d file(s) an earlier run left in %s/", removed, folder)
    kept = _unrecorded(folder, patterns)
    if kept:
        log.warning("%s/ holds %s file(s) this program has no record of writing (such as %s): kept; remove them "
                    "if they are stale", folder, f"{len(kept)}+" if len(kept) >= 1000 else len(kept), kept[0])
    log.debug("%s/ is locked for this run (pid %d)", folder, os.getpid())
    return OutputDir(folder, command, patterns, fd, len(record))
