"""One shape-fit run with its files: the work of `python -m app fit`, callable from Python.

    from app.scenes.fit_run import run_fit
    from app.scenes.fit_settings import FitSettings
from app.scenes.run_loop import iterate

    result = run_fit(FitSettings("spot", subdiv=4), "out/spot")
    result.status      # "ok", "diverged" or "interrupted" (run_fit_safely adds "error")
    result.exit_code   # 0, 1, 130 (2 bad input, 3 internal error: run_fit_safely)
    result.record      # what fit.json holds: settings, backend, losses, status, launches and host syncs per iteration

`run_fit` writes exactly what the `fit` command writes (the command is a thin wrapper):
`fit.json`, `final.<fmt>` (in the target file's coordinates), `loss.png` and `loss.svg`,
with `dump_every` K also `frames/iter_NNNNN.<fmt>` every K iterations, and with `video`
`progress.mp4` (a preview of the mesh every K iterations, or 100 frames over the run: the mesh over the
target's silhouette as a pale blue ghost with its outline, captioned with the iteration and its loss).
fit.json is written last: a folder with a fit.json holds a finished (or marked) run.

Before the backend starts: the settings (`FitSettings.validate`), the target file, and
the output folder (created, writable, locked for this run: a second run into it is
refused naming this one's pid; an earlier run's files are cleared). Then:

- `diverged`: the loss became NaN or infinite, or grew past `GROWTH_LIMIT` times its
  first value (the run stops there), or the run ended with a loss above its first.
  fit.json says `"diverged": true` and `"diverged_at"` (the iteration); exit code 1.
- `interrupted`: `stop` was raised (the command raises it on SIGINT/SIGTERM): the iteration
  in progress finishes, every file is written, fit.json says `"interrupted": true` and
  `"iterations_done"`; exit code 130.

`backend.init(settings.arch)` runs in the calling process (a no-op when that backend already runs).
"""
from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from app.scenes.fit_settings import FitSettings
from app.scenes.run_loop import iterate
from engine import atomic, output_dir
from engine.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_RESULT_BAD, UserError
from engine.interrupt import StopFlag

OUTPUTS = ("fit.json", "final.*", "loss.png", "loss.svg", "progress.mp4", "frames/iter_*.*")
GROWTH_LIMIT = 100.0  # a loss this many times the first one: diverged, the run stops
VIDEO_FRAMES = 100  # progress.mp4 frames without dump_every
VIDEO_SIZE, VIDEO_FPS, VIDEO_EXTENT = 320, 10.0, 1.25  # the preview shows [-1.25, 1.25]^2 of the normalised frame
EXIT_CODES = {"ok": EXIT_OK, "diverged": EXIT_RESULT_BAD, "interrupted": EXIT_INTERRUPTED}


@dataclass
class FitResult:
    """What a fit run left: its status, exit code, folder, fit.json's record and a one-line message."""

    status: str  # "ok", "diverged", "interrupted" or (run_fit_safely) "error"
    out_dir: Path
    record: dict = field(default_factory=dict)
    message: str = ""
    exit_code: int = EXIT_OK

    @property
    def files(self) -> list[Path]:
        return [self.out_dir / name for name in self.record.get("files", [])]


def _estimate_bytes(settings: FitSettings) -> int:
    vertices = 10 * 4 ** settings.subdiv + 2
    mesh = vertices * 40 + 2 * vertices * 20  # OBJ text: v and f lines
    dumps = settings.iterations // settings.dump_every + 1 if settings.dump_every else 0
    return output_dir.MIN_FREE_BYTES + mesh * (1 + dumps) + settings.iterations * 24 + (2 << 20) * settings.video


def run_fit(settings: FitSettings, out_dir: str | Path, stop: StopFlag | None = None) -> FitResult:
    """Run one fit and write its files into `out_dir` (see the module docstring).

    Raises `UserError` for bad settings, target or folder (before any backend starts); `stop`
    (e.g. `engine.interrupt.graceful_stop()`) ends the run early, its files marked interrupted."""
    from app.scenes.shape_fit import load_target
    from engine import backend

    settings.validate()
    backend.check_requested(settings.arch)
    load_target(settings.target)  # a bad target fails before the folder is touched or a backend starts
    with output_dir.claim(out_dir, "fit", OUTPUTS, need_bytes=_estimate_bytes(settings)) as folder:
        return _run(settings, folder.path, stop if stop is not None else StopFlag())


def run_fit_safely(settings: FitSettings, out_dir: str | Path, stop: StopFlag | None = None) -> FitResult:
    """`run_fit` that never raises: a failure is a result with status "error", exit code 2 (bad input) or 3 (a bug).

    For batches, where a failed job is a row: `record` holds "error" and, for a bug, "traceback"."""
    try:
        return run_fit(settings, out_dir, stop)
    except UserError as exc:
        return FitResult("error", Path(out_dir), {"status": "error", "error": str(exc)}, str(exc), exc.exit_code)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        return FitResult("error", Path(out_dir), {"status": "error", "error": text, "traceback": traceback.format_exc()},
                         f"internal error: {text}", EXIT_INTERNAL)


def _diverged_at(losses: list[float], final: float | None) -> int | None:
    """The iteration from which the loss stayed above its first value to the end, or None if it ended lower."""
    if final is not None and math.isfinite(final) and final <= losses[0]:
        return None
    k = len(losses)
    while k > 1 and losses[k - 1] > losses[0]:
        k -= 1
    return k


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass
class _Diverged(Exception):
    """Ends a run: the loss became NaN or infinite (`finite` False), or grew past GROWTH_LIMIT, at `iteration`."""

    iteration: int
    why: str
    finite: bool


def _run(settings: FitSettings, out: Path, stop: StopFlag) -> FitResult:
    from app.scenes.shape_fit import ShapeFit
    from engine import backend
    from engine.host_costs import IterationCosts

    running = backend.init(settings.arch)
    fit = ShapeFit(settings.target, settings.subdiv, settings.lr, settings.smooth, settings.seed, settings.samples,
                   smooth_end=settings.smooth_end, schedule_iters=settings.iterations, losses=settings.weights,
                   sync_every=settings.sync_every)
    try:
        costs = IterationCosts()  # launches and host syncs per iteration (engine.host_costs)
        started = time.perf_counter()
        files, previews, ended = _iterations(fit, settings, out, stop, costs)
        final = fit.evaluate() if ended is None or ended.finite else None  # did the run end above where it started?
        wall = time.perf_counter() - started
        status, diverged_at, why = _outcome(fit, settings.iterations, stop, ended, final)
        mark = {"diverged": (diverged_at, "diverged"), "interrupted": (fit.iteration, "interrupted")}.get(status)
        files += _write_outputs(fit, settings, out, running.name, previews, mark)
        record = {
            "status": status, "target": settings.target, "target_name": fit.target.name, "arch": running.name,
            "backend": running.as_record(), "subdiv": settings.subdiv, "vertices": fit.x.shape[0],
            "iterations": settings.iterations, "iterations_done": fit.iteration, "lr": settings.lr,
            "smooth": settings.smooth, "smooth_end": fit.smooth_end, "weights": fit.weights, "samples": fit.n_samples,
            "seed": settings.seed, "sync_every": settings.sync_every, "dump_every": settings.dump_every,
            "mesh_format": settings.mesh_format,
            "video": settings.video, "wall_s": round(wall, 3), "orders": fit.orders(), "misses": fit.misses(),
            "final_loss": _finite(final), "diverged": diverged_at is not None, "diverged_at": diverged_at,
            "divergence": why or None, "interrupted": status == "interrupted", "signal": stop.signal_name or None,
            "losses": [_finite(value) for value in fit.losses], "files": [*files, "fit.json"], **costs.record(),
        }
        atomic.write_json(out / "fit.json", record)
        result = FitResult(status, out, record, exit_code=EXIT_CODES[status])
        result.message = _message(result, fit.target.name, running.name)
        return result
    finally:
        fit.destroy()


def _iterations(fit, settings: FitSettings, out: Path, stop: StopFlag, costs) -> tuple[list[str], list, _Diverged | None]:
    """The fit's iterations under the run loop: (the frames written, the video's previews, how it diverged or None)."""
    from app.scenes.shape_fit import FitDiverged

    files: list[str] = []
    previews: list[tuple[int, object]] = []  # (iteration, the mesh before it over the target's ghost)
    every = settings.dump_every or max(1, settings.iterations // VIDEO_FRAMES)
    ghost = _ghost(fit) if settings.video else None

    def frame(i: int) -> None:  # the mesh before iteration i
        if settings.dump_every and i % settings.dump_every == 0:
            name = f"frames/iter_{i:05d}.{settings.mesh_format}"
            fit.export_mesh(out / name)
            files.append(name)
        if settings.video and i % every == 0:
            previews.append((i, _preview(fit, ghost)))

    def checked(read) -> None:  # the losses read since the last check: NaN, infinite or grown too far ends the run
        seen = len(fit.losses_read)
        try:
            read()
        except FitDiverged as exc:
            raise _Diverged(exc.iteration, f"the loss became {exc.loss}", finite=False) from None
        losses = fit.losses_read
        for k in range(seen, len(losses)):
            if losses[k] > GROWTH_LIMIT * losses[0]:
                raise _Diverged(k, f"the loss grew to {losses[k] / losses[0]:.3g} times its first value", finite=True)

    def step(i: int) -> str:
        with costs.iteration(i):
            checked(fit.step)  # the losses are read (and checked) every sync_every-th step
        return f"loss {fit.losses_read[-1]:.3e}" if fit.losses_read else "loss not read yet"

    try:
        iterate(step, settings.iterations, desc=f"fit {fit.target.name}", stop=stop, on_frame=frame)
        checked(fit.read_losses)  # the last steps' losses
    except _Diverged as exc:
        return files, previews, exc
    return files, previews, None


def _outcome(fit, iterations: int, stop: StopFlag, ended: _Diverged | None,
             final: float | None) -> tuple[str, int | None, str]:
    """(status, the iteration it diverged at or None, why) of a run whose loop ended as `ended` (None: it ran out
    or was stopped), `final` the loss after its last update."""
    if ended is not None:
        return "diverged", ended.iteration, ended.why
    if stop and fit.iteration < iterations:
        return "interrupted", None, ""
    diverged_at = _diverged_at(fit.losses, final) if fit.losses else None
    if diverged_at is None:
        return "ok", None, ""
    return "diverged", diverged_at, f"the loss ended above its first value ({fit.losses[0]:.3e} -> {final:.3e})"


def _ghost(fit):
    from app.mesh_preview import Ghost

    return Ghost(fit.target.vertices, fit.target.faces, size=VIDEO_SIZE, extent=VIDEO_EXTENT)


def _preview(fit, ghost):
    from app.mesh_preview import render

    return ghost.under(render(fit.vertices(), fit.faces, size=VIDEO_SIZE, extent=VIDEO_EXTENT))


def video_caption(name: str, iteration: int, losses: list[float]) -> str:
    """A progress frame's caption: the iteration it shows and that mesh's loss (computed in the iteration's step)."""
    loss = f"loss {losses[iteration]:.3e}" if iteration < len(losses) else "loss not computed"
    return f"{name}: iteration {iteration}, {loss} (target: blue ghost)"


def _write_outputs(fit, settings: FitSettings, out: Path, arch: str, previews: list,
                   mark: tuple[int, str] | None) -> list[str]:
    """The final mesh, the loss plots and the progress video; their names (fit.json comes after them)."""
    from app.plot import write_loss_plot
    from engine import image_io

    final = f"final.{settings.mesh_format}"
    fit.export_mesh(out / final)
    title = f"{fit.target.name}, subdiv {settings.subdiv}, lr {settings.lr:g}, {arch}: {fit.orders():.2f} orders"
    written = [final]
    plots = write_loss_plot(out / "loss", fit.losses, title, mark=mark)
    written += [path.name for path in plots]
    if previews:
        frames = [image_io.caption_panel(pixels, video_caption(fit.target.name, i, fit.losses)) for i, pixels in previews]
        image_io.write_mp4(out / "progress.mp4", frames, fps=VIDEO_FPS)
        written.append("progress.mp4")
    return written


def _message(result: FitResult, name: str, arch: str) -> str:
    record, out = result.record, result.out_dir
    losses = [value for value in record["losses"] if value is not None]
    span = f"loss {losses[0]:.3e} -> {losses[-1]:.3e}" if losses else "no iteration"
    if result.status == "diverged":
        return (f"FIT DIVERGED at iteration {record['diverged_at']}: {record['divergence']}; lower --lr "
                f"(outputs in {out}/, fit.json \"diverged\": true)")
    if result.status == "interrupted":
        return (f"stopped after iteration {record['iterations_done']} of {record['iterations']}; outputs in {out}/ marked "
                "\"interrupted\": true")
    top = [name for name in record["files"] if "/" not in name]
    frames = len(record["files"]) - len(top)
    return (f"fit {name} on {arch}: {record['iterations_done']} iterations in {record['wall_s']:.1f} s, {span} "
            f"({record['orders']:.2f} orders), misses {record['misses']}; wrote {out}/" + ", ".join(top)
            + (f" and {frames} frames" if frames else ""))
