"""Headless acceptance: run every registered claim, print a line per check, write report.json.

Backend A (`--arch`) runs in this process; backend B (`--parity-arch`) runs in one
worker process shared by every claim (restarted for the next claim if one killed it).
Everything that can be checked is checked before a backend starts: the claim names,
both backends' names (an explicit cuda without a GPU, `TI_ARCH`), the output folder
(created, writable, locked for this run, cleared of an earlier run's report and renders).

Exit codes: 0 every claim passed; 1 a claim failed (the result line says which);
2 bad flags or an unusable backend (the parity worker's included); 3 a claim crashed:
its traceback goes into report.json and a crash log named on stderr, and the other
claims still run; 130 SIGINT/SIGTERM: the claim in progress stops, report.json holds the
claims done and `"interrupted": true`.
"""
from __future__ import annotations

import importlib
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app import crash_log
from app.claims import CLAIMS
from engine import atomic, backend, output_dir
from engine.errors import EXIT_INTERNAL, EXIT_OK, EXIT_RESULT_BAD, Interrupted, UserError
from engine.worker import BackendWorker, WorkerUserError

PASS, FAIL = "\u2713", "\u2717"
OUTPUTS = ("report.json", "raymarch_*.png", "fit_*.obj", "launch_overhead.md", "pose_recovery_t*.png")  # claims' files
RENDER_CLAIMS = ("render_gradcheck", "render_grad_parity", "pose_recovery",  # use the shared differentiable renderer
                 "pose_recovery_png", "invert_verdict")
log = logging.getLogger(__name__)


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
        """The worker process running the parity backend (started on first use, again if it died)."""
        worker = self._workers.get(self.parity_arch)
        if worker is None or not worker.alive:
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


def _run_claim(ctx: ClaimContext, claims: list[dict]) -> None:
    """Run one claim and append its record for report.json (before its banner: an interrupt after the banner
    keeps it). A crash fails the claim (with a crash log), not the run."""
    started = time.perf_counter()
    error = crash = None
    try:
        importlib.import_module(CLAIMS[ctx.name]).run(ctx)
    except WorkerUserError:
        raise  # the parity backend is unusable: no claim can compare, the run stops (exit 2)
    except UserError as exc:
        error = str(exc)
    except Exception as exc:  # a bug in a claim (or a crashed worker) fails that claim, not the whole run
        summary = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        error = f"internal error: {type(exc).__name__}{': ' + summary if summary else ''}"
        text = crash_log.format_exception(exc)
        crash = {"traceback": text, "crash_log": str(crash_log.write(text, f"claim {ctx.name}: {error}"))}
    if error:
        ctx.check(False, f"{ctx.name}: {error}")
    record = {"name": ctx.name, "passed": ctx.passed, "wall_s": round(time.perf_counter() - started, 3),
              "metrics": ctx.metrics, "checks": ctx.checks}
    if error:
        record["error"] = error
    if crash:
        record.update(crash)
    claims.append(record)
    print(f"{ctx.name.upper()} ACCEPTANCE {'PASSED' if ctx.passed else 'FAILED'}", flush=True)


def claim_names(only: str | None) -> list[str]:
    """The claims `--only` names (all when not given); UserError for an unknown or empty list."""
    if only is None:
        return list(CLAIMS)
    names = [name.strip() for name in only.split(",") if name.strip()]
    if not names:
        raise UserError(f"--only '{only}' names no claim (known: {', '.join(CLAIMS)})")
    unknown = [name for name in names if name not in CLAIMS]
    if unknown:
        raise UserError(f"unknown claim {', '.join(unknown)} in --only (known: {', '.join(CLAIMS)})")
    return names


def run_headless(arch: str | None, parity_arch: str | None, out: str, only: str | None) -> int:
    """Run the claims (all, or the comma-separated `only`) and return the process exit code."""
    names = claim_names(only)
    _, parity_arch = backend.resolve_archs(arch, parity_arch)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    with output_dir.claim(out, "--headless", OUTPUTS) as folder:
        running = backend.init(arch)
        print(f"headless acceptance: {running.name} (parity: {parity_arch}), {len(names)} claim(s), "
              f"output in {folder.path}/", flush=True)
        if any(name in RENDER_CLAIMS for name in names):
            # before any other claim's fields: Taichi keys its offline cache by SNode ids, so the renderer's
            # kernels (minutes to compile) load from the cache only when its fields are the process's first
            from app.scenes.inverse_render import renderer
            renderer()
        workers: dict[str, BackendWorker] = {}
        claims: list[dict] = []
        interrupted: Interrupted | None = None
        try:
            for name in names:
                _run_claim(ClaimContext(name, running, parity_arch, folder.path, workers), claims)
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = exc if isinstance(exc, Interrupted) else Interrupted("SIGINT")
        finally:
            for worker in workers.values():
                worker.kill() if interrupted else worker.close()
        report = _report(running, parity_arch, started_at, time.perf_counter() - started, claims)
        report["interrupted"] = interrupted is not None
        atomic.write_json(folder.path / "report.json", report)
    if interrupted:
        raise Interrupted(interrupted.signal_name, f"report.json in {folder.path}/ holds the {len(claims)} claim(s) "
                                                   f"done of {len(names)}, marked \"interrupted\": true")
    return _verdict(claims, report["wall_s"], running.name, parity_arch)


def _report(running: backend.Backend, parity_arch: str, started_at: str, wall: float, claims: list[dict]) -> dict:
    import taichi as ti

    return {"arch": running.name, "parity_arch": parity_arch, "taichi": ".".join(map(str, ti.__version__)),
            "backend": running.as_record(), "started": started_at, "wall_s": round(wall, 3), "claims": claims}


def _verdict(claims: list[dict], wall: float, arch: str, parity_arch: str) -> int:
    crashed = [claim for claim in claims if "crash_log" in claim]
    failed = [claim["name"] for claim in claims if not claim["passed"]]
    if crashed:
        logs = ", ".join(f"{claim['name']}: {claim['crash_log']}" for claim in crashed)
        print(f"ACCEPTANCE FAILED: {len(failed)} of {len(claims)} claims failed ({', '.join(failed)})")
        print(f"error: internal error in {len(crashed)} claim(s); full tracebacks in report.json and {logs}",
              file=sys.stderr)
        return EXIT_INTERNAL
    if failed:
        print(f"ACCEPTANCE FAILED: {len(failed)} of {len(claims)} claims failed ({', '.join(failed)})")
        return EXIT_RESULT_BAD
    print(f"ALL {len(claims)} CLAIMS PASSED in {wall:.1f} s on {arch} (parity {parity_arch})")
    return EXIT_OK
