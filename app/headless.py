"""Headless acceptance: run every registered claim, print a line per check, write report.json.

Backend A (`--arch`) runs in this process; backend B (`--parity-arch`) runs in one
worker process shared by every claim. Exit code 0 only if every claim passed.
"""
from __future__ import annotations

import importlib
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.claims import CLAIMS
from engine import atomic, backend
from engine.errors import UserError
from engine.worker import BackendWorker

PASS, FAIL = "\u2713", "\u2717"


def default_parity_arch(arch: str) -> str:
    """The natural second backend: vulkan beside the cpu, else the cpu."""
    return "vulkan" if arch == "cpu" else "cpu"


class ClaimContext:
    """What a claim sees: both backends, the output folder, and where to record results."""

    def __init__(self, name: str, arch: backend.Backend, parity_arch: str, out: Path, workers: dict):
        self.name = name
        self.arch = arch.name
        self.parity_arch = parity_arch
        self.out = out
        self.metrics: dict[str, Any] = {}
        self.checks: list[dict] = []
        self._workers = workers

    @property
    def parity(self) -> BackendWorker:
        """The worker process running the parity backend (started on first use)."""
        if self.parity_arch not in self._workers:
            self._workers[self.parity_arch] = BackendWorker(self.parity_arch)
        return self._workers[self.parity_arch]

    def check(self, ok: bool, text: str) -> bool:
        ok = bool(ok)
        self.checks.append({"passed": ok, "text": text})
        print(f"{PASS if ok else FAIL} {text}", flush=True)
        return ok

    def metric(self, **values: Any) -> None:
        self.metrics.update(values)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check["passed"] for check in self.checks)


def _run_claim(ctx: ClaimContext) -> dict:
    started = time.perf_counter()
    error = None
    try:
        importlib.import_module(CLAIMS[ctx.name]).run(ctx)
    except UserError as exc:
        error = str(exc)
    except Exception as exc:  # a bug in a claim fails that claim, not the whole run
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)
    if error:
        ctx.check(False, f"{ctx.name}: {error}")
    print(f"{ctx.name.upper()} ACCEPTANCE {'PASSED' if ctx.passed else 'FAILED'}", flush=True)
    record = {"name": ctx.name, "passed": ctx.passed, "wall_s": round(time.perf_counter() - started, 3),
              "metrics": ctx.metrics, "checks": ctx.checks}
    if error:
        record["error"] = error
    return record


def run_headless(arch: str | None, parity_arch: str | None, out: str, only: list[str] | None) -> int:
    """Run the claims (all, or `only`) and return the process exit code."""
    names = only or list(CLAIMS)
    unknown = [name for name in names if name not in CLAIMS]
    if unknown:
        raise UserError(f"unknown claim {', '.join(unknown)} in --only (known: {', '.join(CLAIMS)})")
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    running = backend.init(arch)
    parity_arch = backend.requested_arch(parity_arch) if parity_arch else default_parity_arch(running.name)
    if parity_arch == "auto":
        raise UserError("--parity-arch must name a backend (cuda, vulkan or cpu), not auto")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"headless acceptance: {running.name} (parity: {parity_arch}), {len(names)} claim(s), output in {out_dir}/",
          flush=True)
    workers: dict[str, BackendWorker] = {}
    try:
        claims = [_run_claim(ClaimContext(name, running, parity_arch, out_dir, workers)) for name in names]
    finally:
        for worker in workers.values():
            worker.close()
    import taichi as ti

    report = {
        "arch": running.name, "parity_arch": parity_arch, "taichi": ".".join(map(str, ti.__version__)),
        "backend": running.as_record(), "started": started_at,
        "wall_s": round(time.perf_counter() - started, 3), "claims": claims,
    }
    atomic.write_json(out_dir / "report.json", report)
    failed = [claim["name"] for claim in claims if not claim["passed"]]
    if failed:
        print(f"ACCEPTANCE FAILED: {len(failed)} of {len(claims)} claims failed ({', '.join(failed)})")
        return 1
    print(f"ALL {len(claims)} CLAIMS PASSED in {report['wall_s']:.1f} s on {running.name} (parity {parity_arch})")
    return 0
