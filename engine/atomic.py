"""Atomic file output: write to a temporary file beside the target, then rename.

An interrupted run leaves either the old file or the new one, never half of one: the
temporary file is removed whenever the write fails or an exception (a caught signal
included, see `engine.interrupt`) passes through. The file gets the permissions a plain
`open(path, "w")` would give it: an existing file keeps its mode, a new one gets
0666 less the umask (`tempfile.mkstemp` would give 0600).

A write that fails (a full disk, a file-size limit, a folder made read-only meanwhile)
raises `UserError` naming the file: the files already written stay as they are.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

from engine import output_dir
from engine.errors import UserError


def _temporary(target: Path) -> Path:
    """Create an empty, new hidden file beside `target` with the umask's permissions."""
    for _ in range(100):
        # the suffix stays last: writers (matplotlib, ffmpeg) infer the format from it
        tmp = target.with_name(f".{target.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{target.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; it replaces `path` only if the block succeeds.

    Example: `with atomic_path("out/a.bin") as tmp: tmp.write_bytes(b"...")`."""
    target = Path(path)
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary(target)
        yield tmp
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))  # as open() would: the old file's mode
        except FileNotFoundError:
            pass
        os.replace(tmp, target)
        tmp = None
        output_dir.note_written(target)  # the folder's owner records it: the next run there may remove it
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"cannot write {target}: {reason}") from None
    finally:
        if tmp is not None:
            with suppress(OSError):
                os.unlink(tmp)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2) + "\n")
