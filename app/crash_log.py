"""Crash logs: where an internal error's full traceback goes, so the terminal gets one line.

`write(text, what)` writes `crash-<UTC time>-<pid>.log` into `log_dir()`:
`$SHANNON_LOG_DIR` if set, else `$XDG_STATE_HOME/shannon-autograd/logs`
(`~/.local/state/shannon-autograd/logs`), else, if that cannot be written, the system's
temporary folder. It returns the file's path for the one-line message (exit code 3).
"""
from __future__ import annotations

import os
import sys
import tempfile
import traceback
from datetime import datetime, timezone
from pathlib import Path

LOG_DIR_ENV = "SHANNON_LOG_DIR"


def log_dir() -> Path:
    """The folder crash logs go to (see the module docstring)."""
    if os.environ.get(LOG_DIR_ENV):
        return Path(os.environ[LOG_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "shannon-autograd" / "logs"


def format_exception(exc: BaseException) -> str:
    """The full traceback of `exc`, with a worker's own traceback after it when it carries one."""
    text = "".join(traceback.format_exception(exc))
    detail = getattr(exc, "detail", "")
    if detail and detail != str(exc):
        text += f"\nthe worker process's traceback:\n{detail}"
    return text


def write(text: str, what: str) -> Path:
    """Write a crash log (`what` happened, then `text`, typically a traceback); return its path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    body = f"{what}\ncommand: {' '.join(sys.argv)}\ntime: {stamp} UTC, pid {os.getpid()}\n\n{text}"
    for folder in (log_dir(), Path(tempfile.gettempdir())):
        path = folder / f"crash-{stamp}-{os.getpid()}.log"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
            return path
        except OSError:
            continue
    return Path("(no log: no writable folder)")
