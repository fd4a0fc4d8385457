"""`python -m app bench invert`: one inverse-rendering iteration, ours (Taichi cpu) vs Dr.Jit (LLVM, AD types).

`--arch cuda` (or vulkan) times ours on that backend instead (Dr.Jit stays on its LLVM CPU backend; the memory
measurement, per-process peak RSS, runs on cpu only and is skipped there); `auto` means cpu here.

One iteration = the image loss of the robot-arm scene against a target (forward: march
and hold, taped shading, soft silhouettes, compose, L2 loss) and its gradient with respect
to theta (backward), at 256x128, 512x256 and 1024x512. Ours: one `engine.diff_render.DiffRenderer` with
its fields allocated for the largest size timed, as the app's (sizes are runtime arguments: its kernels compile
once, or load from the offline cache, and every smaller size costs no compile; the first-call table shows it).
Peer: `bench/drjit_render.py`, the same algorithm on `drjit.llvm.ad`.

Per size, both sides get the same data: the target is our render at theta* (the timeline at
t=0.5), the iteration runs at theta* perturbed by the default perturbation (seed 2). Before
timing, the peer must agree with ours (`compare`): >= IMAGE_MIN_SHARE of the pixels within
IMAGE_ATOL and at most IMAGE_MAX_FAR_SHARE of them off by more than IMAGE_FAR, loss within LOSS_RTOL, and every theta
component's gradient relative to max(|ours|, GRAD_FLOOR * max|ours|), for the loss over the pixels
where both images agree within PIXEL_AGREE (`check`): within GRAD_RTOL over those farther than
BAND_PX pixels from a silhouette (`engine.diff_render.edge_mask`), within BAND_GRAD_RTOL over the
band. In the band the gradient is taken at held points on or beside a tightly rounded edge: a
silhouette's closest approach, which golden-section search locates only to ~1e-4 m in float32
(the distance is flat there), and grazing hits, which sphere tracing's last steps approach slowly;
the derivative moves by the held point's error over the edge's radius (a few per cent), and each
side's own march holds slightly different points (measured 2026-11-30, docs/RESULTS.md: outside
the band 1e-4 (smooth pixels) to 2e-3, in it up to 1e-1). A disagreement prints the comparison
and no times (exit 1). Times: --repeats iterations per
side, back to back, one side after the other (as a user runs one of them: interleaved, each side's iteration
started with the caches the other's left: measured 2026-12-05 at 256x128, ours 50.1 ms interleaved against 42.2 in
a block, Dr.Jit 82.3 against 79.3, `docs/results-log.md` "Stop 47"), after one warm-up (first-call times, which
include compiles, reported apart); medians with min/max. Threads: both sides get --threads (Taichi's
cpu_max_num_threads, Dr.Jit's thread pool). Memory (unless --no-memory): one child process per
side and size (after an unmeasured one that leaves its kernels in the kernel caches, see `_memory`)
runs a warm iteration, resets the peak RSS (/proc/self/clear_refs), runs one more
and reports the peak RSS growth during it, the process's peak RSS and, for ours, the bytes of
the renderer's Taichi fields (values + gradients). --profile splits our iteration
into march and hold (untaped), the taped forward, and the backward.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from bench import bench_parser, emit, machine_load
from engine.errors import UserError

SIZES = ((256, 128), (512, 256), (1024, 512))
T_TARGET = 0.5
SEED = 2
ADAM_LR = 0.01  # the Adam iterations' learning rate (`Ours.adam_iterations`)
IMAGE_ATOL, IMAGE_MIN_SHARE = 1e-3, 0.999
IMAGE_FAR, IMAGE_MAX_FAR_SHARE = 0.05, 1e-4  # at most 1 pixel in 10,000 off by more than 0.05
LOSS_RTOL = 1e-3
GRAD_RTOL, BAND_GRAD_RTOL, GRAD_FLOOR = 5e-3, 2e-1, 1e-2
BAND_PX = 2  # the silhouette band: pixels within this many of one
PIXEL_AGREE = 1e-4


def _grown(mask: np.ndarray) -> np.ndarray:
    """mask with every pixel's 8 neighbours added (bool (height, width))."""
    p = np.pad(mask, 1)
    h, w = mask.shape
    out = mask.copy()
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            out |= p[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
    return out


def agreeing_pixels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 (height, width) mask: 1 where two images agree within PIXEL_AGREE and so do the 8 neighbours."""
    ok = np.abs(a.astype(np.float64) - b.astype(np.float64)).max(axis=-1) <= PIXEL_AGREE
    p = np.pad(ok, 1, mode="edge")
    h, w = ok.shape
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            ok = ok & p[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
    return ok.astype(np.float32)


def compare(ours: dict, peer: dict, interior: tuple[dict, dict], band: tuple[dict, dict]) -> dict:
    """Agreement of two evaluations {"image" (H, W, 3), "loss", "grad" (N_THETA,)} of the whole image, and of the
    gradients of the loss over the agreeing pixels (`agreeing_pixels`) outside the silhouette band (`interior`:
    ours, peer) and in it (`band`): the figures and `ok`."""
    err = np.abs(ours["image"].astype(np.float64) - peer["image"].astype(np.float64)).max(axis=-1)

    def rel(a: dict, b: dict) -> np.ndarray:
        g_a, g_b = np.asarray(a["grad"], np.float64), np.asarray(b["grad"], np.float64)
        return np.abs(g_b - g_a) / np.maximum(np.abs(g_a), GRAD_FLOOR * np.abs(g_a).max())

    grad_rel, edge_rel = rel(*interior), rel(*band)
    loss_rel = abs(peer["loss"] - ours["loss"]) / abs(ours["loss"])
    out = {"image_max_err": float(err.max()), "image_share": float((err <= IMAGE_ATOL).mean()),
           "image_far": float((err > IMAGE_FAR).mean()),
           "loss_rel": float(loss_rel), "grad_rel": grad_rel, "grad_worst": int(np.argmax(grad_rel)),
           "edge_rel": edge_rel, "edge_worst": int(np.argmax(edge_rel)),
           "grad_rel_whole": rel(ours, peer), "agreeing": float(interior[0].get("share", 1.0)),
           "edge_share": float(band[0].get("share", 0.0))}
    out["ok"] = bool(out["image_far"] <= IMAGE_MAX_FAR_SHARE and out["image_share"] >= IMAGE_MIN_SHARE
                     and loss_rel <= LOSS_RTOL and grad_rel.max() <= GRAD_RTOL and edge_rel.max() <= BAND_GRAD_RTOL)
    return out


def describe(c: dict) -> str:
    from engine.scene_theta import NAMES

    whole = c["grad_rel_whole"]
    return (f"image: {c['image_share'] * 100:.3f}% of pixels within {IMAGE_ATOL:g}, {c['image_far'] * 100:.4f}% "
            f"off by more than {IMAGE_FAR:g}, max err {c['image_max_err']:.2g}; "
            f"loss rel {c['loss_rel']:.1e}; gradient over the {c['agreeing'] * 100:.2f}% agreeing pixels outside the "
            f"silhouette band: max rel {c['grad_rel'].max():.1e} ({NAMES[c['grad_worst']]}); over the "
            f"{c['edge_share'] * 100:.2f}% agreeing in it: {c['edge_rel'].max():.1e} ({NAMES[c['edge_worst']]}); "
            f"over the whole image: max rel {whole.max():.1e} ({NAMES[int(np.argmax(whole))]})")


def check(ours, peer, theta: np.ndarray) -> dict:
    """Both sides evaluated at theta on the whole image, then on the agreeing pixels outside and inside the band of
    BAND_PX pixels around our silhouettes (ours's "edges") (see `compare`)."""
    a, b = ours.evaluate(theta), peer.evaluate(theta)
    agree = agreeing_pixels(a["image"], b["image"]) > 0
    band = a["edges"]
    for _ in range(BAND_PX):
        band = _grown(band)
    parts = []
    for mask in (agree & ~band, agree & band):
        ours.set_weight(mask.astype(np.float32))
        peer.set_weight(mask.astype(np.float32))
        am, bm = ours.evaluate(theta), peer.evaluate(theta)
        am["share"] = float(mask.mean())
        parts.append((am, bm))
    ours.set_weight(None)
    peer.set_weight(None)
    return compare(a, b, *parts)


def start_theta() -> tuple[np.ndarray, np.ndarray]:
    """theta* (the target's) and the iteration's theta (theta* perturbed, default magnitudes, seed SEED)."""
    from app.scenes.robot_arm import theta_at
    from engine.scene_theta import DEFAULT_PERTURB, perturb

    truth = theta_at(T_TARGET)
    return truth, perturb(truth, DEFAULT_PERTURB, SEED).astype(np.float32).astype(np.float64)


class Ours:
    """Our side: a DiffRenderer with fields for views up to width x height, L2, 1-pixel edges."""

    def __init__(self, width: int, height: int):
        from engine.diff_render import DiffRenderer

        self.r = DiffRenderer(width, height)

    def set_view(self, width: int, height: int, truth: np.ndarray) -> np.ndarray:
        """View of that size; the target rendered at truth; returns the target and the camera values."""
        from engine.render import Camera

        self.r.set_view(Camera(), width, height)
        self.r.set_loss("l2", 1, 1.0)
        self.r.set_theta(truth)
        self.target = self.r.render()
        self.r.set_target(self.target)
        return self.r.cam.to_numpy()

    def set_weight(self, weight: np.ndarray | None) -> None:
        self.r.set_target(self.target, weight)

    def evaluate(self, theta: np.ndarray) -> dict:
        from engine.diff_render import edge_mask

        self.r.set_theta(theta)
        loss, grad = self.r.loss_and_gradient()
        return {"loss": loss, "grad": grad, "image": self.r.image_numpy(), "edges": edge_mask(self.r)}

    def iteration(self, theta: np.ndarray) -> None:
        self.r.set_theta(theta)
        self.r.loss_and_gradient()

    def adam_iterations(self, theta: np.ndarray, steps: int) -> float:
        """ms per iteration of `steps` Adam iterations from theta that never wait for the device (the loss and the
        gradient stay there, `ThetaAdam` steps on them: `invert --method adam`'s iteration), timed as one block
        that ends at its one read; a warm-up step first (the optimiser's own kernels)."""
        from engine import scene_theta
        from engine.kernels.kinematics import N_THETA
        from engine.theta_adam import ThetaAdam

        self.r.set_theta(theta)
        opt = ThetaAdam(self.r.theta, np.ones(N_THETA), *scene_theta.limits(), lr=ADAM_LR, history=steps)
        try:
            self.r.gradient_on_device()
            opt.step(self.r.loss)
            opt.read()
            started = time.perf_counter()
            for _ in range(steps):
                self.r.gradient_on_device()
                opt.step(self.r.loss)
            rows = opt.read()
            elapsed = time.perf_counter() - started
        finally:
            opt.destroy()
        if not np.all(np.isfinite(rows)) or rows[:, 1].any():
            raise RuntimeError("bench invert: an Adam iteration on the device had a loss or gradient that is not "
                               "finite")
        return elapsed * 1e3 / steps

    def profile(self, theta: np.ndarray, repeats: int) -> dict:
        """Medians (ms) of: march and hold alone (untaped), the whole taped forward, the backward."""
        r = self.r
        r.set_theta(theta)
        hold, forward, backward = [], [], []
        for _ in range(repeats):
            started = time.perf_counter()
            for band in r.bands():  # (a view of several bands: each in turn, as `gradient_on_device`)
                r._band = band
                r._march()
                r._hold()
            hold.append(time.perf_counter() - started)
            forward.append(0.0)
            backward.append(0.0)
            for k, band in enumerate(r.bands()):
                r.tape.reset(keep=(r.theta,) if k else ())
                started = time.perf_counter()
                with r.tape:
                    r.record(*band)
                forward[-1] += time.perf_counter() - started
                started = time.perf_counter()
                r.tape.backward(r.loss)
                backward[-1] += time.perf_counter() - started
        return {name: statistics.median(v) * 1e3 for name, v in
                (("march and hold", hold), ("taped forward (incl. hold)", forward), ("backward", backward))}


class Peer:
    def __init__(self):
        from bench.drjit_render import DrJitRenderer

        self.r = DrJitRenderer(edge_px=1.0)

    def set_view(self, cam: np.ndarray, width: int, height: int, target: np.ndarray) -> None:
        self.r.set_view(cam, width, height)
        self.target = target
        self.r.set_target(target)

    def set_weight(self, weight: np.ndarray | None) -> None:
        self.r.set_target(self.target, weight)

    def evaluate(self, theta: np.ndarray) -> dict:
        loss, grad = self.r.loss_and_gradient(theta)
        return {"loss": loss, "grad": grad, "image": self.r._numpy(self.r.last_image)}

    def iteration(self, theta: np.ndarray) -> None:
        self.r.loss_and_gradient(theta)


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def _stats(ms: list[float]) -> str:
    return f"{statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f})"


def _parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, text.split(",")):
        try:
            w, h = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise UserError(f"--sizes '{item}': expected WIDTHxHEIGHT, e.g. 256x128") from None
        if (w, h) not in SIZES:
            raise UserError(f"--sizes '{item}': choose from {', '.join(f'{a}x{b}' for a, b in SIZES)}")
        out.append((w, h))
    return out


def main(argv: list[str]) -> int:
    parser = bench_parser("invert", __doc__)
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed iterations per side and size (median reported; default %(default)s)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CPU threads for each side (default: every core, %(default)s here)")
    parser.add_argument("--sizes", type=_parse_sizes, default=list(SIZES), help="e.g. 256x128,512x256 (default: all)")
    parser.add_argument("--no-drjit", action="store_true", help="time ours only")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-process memory measurement")
    parser.add_argument("--profile", action="store_true", help="split our iteration into hold, taped forward, backward")
    options = parser.parse_args(argv)
    if options.repeats < 1 or options.threads < 1:
        raise UserError("--repeats and --threads must be at least 1")
    arch = "cpu" if options.arch in (None, "auto") else options.arch  # auto: cpu, the peer's kind of backend
    os.environ["TI_CPU_MAX_NUM_THREADS"] = str(options.threads)

    from engine import backend, taichi_private
    from engine.progress import bar

    backend.init(arch)
    import taichi as ti

    ti_threads = taichi_private.cpu_threads() if arch == "cpu" else None
    if arch != "cpu" and not options.no_memory:
        print(f"memory: measured on cpu only (the children's peak RSS); skipped on {arch}")
        options.no_memory = True
    peer = None
    if not options.no_drjit:
        try:
            from bench import drjit_render
            drjit_render.set_thread_count(options.threads)
            peer = Peer()
        except ImportError as exc:
            print(f"drjit not usable ({exc}); timing ours only")
    sizes = options.sizes
    truth, theta = start_theta()
    rows, checks, firsts, profiles, views, adam = [], [], [], {}, {}, {}
    ours = Ours(max(w for w, _ in sizes), max(h for _, h in sizes))  # one compile serves every size
    with bar(total=len(sizes) * (2 * options.repeats + 1), desc="invert bench") as progress:
        for width, height in sizes:
            size = f"{width}x{height}"
            first = {"ours": _timed(lambda: ours.set_view(width, height, truth))}
            cam = ours.r.cam.to_numpy()
            views[(width, height)] = (cam, ours.target)
            first["ours"] += _timed(lambda: ours.iteration(theta))
            if peer:
                first["drjit"] = _timed(lambda: peer.set_view(cam, width, height, ours.target))
                first["drjit"] += _timed(lambda: peer.iteration(theta))
                c = check(ours, peer, theta)
                checks.append((size, c))
                if not c["ok"]:
                    print(f"error: at {size} the Dr.Jit port does not agree with ours ({describe(c)}); "
                          "not timing it", file=sys.stderr)
                    return 1
            firsts.append((size, first))
            progress.update(1)
            times: dict[str, list[float]] = {"ours": [], "drjit": []}
            for side, runner in (("ours", ours), ("drjit", peer)):
                for _ in range(options.repeats if runner else 0):
                    times[side].append(_timed(lambda: runner.iteration(theta)))
                    progress.update(0.5 if peer else 1)
            rows.append((size, times))
            adam[size] = ours.adam_iterations(theta, options.repeats)
            progress.update(options.repeats)
            if options.profile:
                profiles[size] = ours.profile(theta, options.repeats)
    ti.reset()  # writes Taichi's offline cache now (the memory children warm their own first: `_memory`)
    memory = {} if options.no_memory else _memory(views, options.threads, peer is not None)

    lines = [f"inverse rendering, one iteration (loss forward + d loss / d theta), robot-arm scene, target t={T_TARGET}, "
             f"start perturbed (default, seed {SEED}); {options.repeats} timed iterations per side after one warm-up "
             f"({machine_load()})", "",
             (f"threads: ours (Taichi {'.'.join(map(str, ti.__version__))} cpu, cpu_max_num_threads) {ti_threads}"
              if arch == "cpu" else f"ours: Taichi {'.'.join(map(str, ti.__version__))} {arch}")
             + (f"; Dr.Jit {drjit_render.dr.__version__} LLVM {'.'.join(map(str, drjit_render.dr.detail.llvm_version()))}"
                f" thread pool {drjit_render.thread_count()}" if peer else ""), "",
             "| size | ours ms, median (min-max) | Dr.Jit ms, median (min-max) | Dr.Jit / ours |",
             "|---|---:|---:|---:|"]
    for size, times in rows:
        ratio = statistics.median(times["drjit"]) / statistics.median(times["ours"]) if peer else float("nan")
        lines.append(f"| {size} | {_stats(times['ours'])} | {_stats(times['drjit']) if peer else '-'} | "
                     f"{ratio:.2f} ({'ours faster' if ratio > 1 else 'Dr.Jit faster'}) |" if peer else
                     f"| {size} | {_stats(times['ours'])} | - | - |")
    lines += ["", f"ours, an Adam iteration that never waits for the device (`invert --method adam`'s: the loss and "
                  f"gradient stay there, Adam at lr {ADAM_LR:g} on every component steps on them; {options.repeats} "
                  "iterations timed as one block ending at its one read; ms per iteration): "
              + "; ".join(f"{size}: {ms:.1f}" for size, ms in adam.items())]
    lines += ["", "first call (set-up, target render, first iteration; compiles included; ms): "
              + "; ".join(f"{size}: ours {f['ours']:.0f}" + (f", Dr.Jit {f['drjit']:.0f}" if 'drjit' in f else "")
                          for size, f in firsts)]
    if checks:
        lines += ["", f"agreement before timing (tolerances: image >= {IMAGE_MIN_SHARE * 100:g}% of pixels within "
                      f"{IMAGE_ATOL:g} and <= {IMAGE_MAX_FAR_SHARE * 100:g}% off by more than {IMAGE_FAR:g}; "
                      f"loss rel <= {LOSS_RTOL:g}; gradient of the "
                      f"loss over the pixels where both images agree within {PIXEL_AGREE:g} (and their neighbours) "
                      f"rel <= {GRAD_RTOL:g} per component farther than {BAND_PX} pixels from a silhouette, "
                      f"<= {BAND_GRAD_RTOL:g} nearer, "
                      f"relative to max(|ours|, {GRAD_FLOOR:g} max|ours|); the "
                      "whole image's gradient is reported, not checked: where a march decision differs in the last "
                      "bit, so do a pixel's colour and gradient):"]
        lines += [f"- {size}: {describe(c)}" for size, c in checks]
    if profiles:
        lines += ["", "our iteration split (ms, medians): "
                  + "; ".join(f"{size}: " + ", ".join(f"{k} {v:.1f}" for k, v in p.items()) for size, p in profiles.items())]
    if memory:
        lines += ["", "memory, one child process per side and size, after an unmeasured one that leaves its kernels in "
                      "the kernel caches (so the measured one loads them; compiling them in the process would leave the "
                      "compiler's freed memory in its RSS): peak RSS growth during one warm forward+backward "
                      "(MiB), the process's peak RSS (MiB); ours also its Taichi fields (values + gradients, MiB; "
                      "allocated at the size rendered)", "",
                  "| size | ours: growth / peak RSS / fields | Dr.Jit: growth / peak RSS |", "|---|---:|---:|"]
        for width, height in sizes:
            o, d = memory.get(("ours", width, height), {}), memory.get(("drjit", width, height), {})
            lines.append(f"| {width}x{height} | {_mem(o, 'growth')} / {_mem(o, 'peak')} / {_mem(o, 'fields')} | "
                         f"{_mem(d, 'growth')} / {_mem(d, 'peak')} |")
    emit("\n".join(lines), "invert", options.out)
    return 0


def _mem(m: dict, key: str) -> str:
    return f"{m[key] / 2**20:.0f}" if key in m else "-"


def _memory(views: dict, threads: int, with_peer: bool) -> dict:
    """{(side, width, height): figures} from one child process each (see `memory_child`); views: {(width, height):
    (camera values, target image)}, handed to the children in a file so that Dr.Jit's never runs Taichi.

    Each measured child follows an unmeasured one with the same arguments, which leaves its kernels in the kernel
    caches (Taichi's offline cache, Dr.Jit's) even where the parent's entries do not serve a child: a process that
    compiles its kernels keeps the compiler's freed memory in its RSS (ours at 1024x512: peak 1.74-1.87 GiB when it
    compiled them, 0.83 GiB when it loaded them; measured, docs/RESULTS.md)."""
    import tempfile

    out = {}
    env = dict(os.environ, TI_CPU_MAX_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as folder:
        for side in ("ours", "drjit") if with_peer else ("ours",):
            for (width, height), (cam, target) in views.items():
                path = os.path.join(folder, f"{width}x{height}.npz")
                np.savez(path, cam=cam, target=target)
                for _ in range(2):  # the first fills the kernel caches; the second, measured, loads its kernels
                    proc = subprocess.run([sys.executable, "-m", "bench.invert", side, path, str(width), str(height),
                                           str(threads)], capture_output=True, text=True, env=env, timeout=1800)
                _collect(out, side, width, height, proc)
    return out


def _collect(out: dict, side: str, width: int, height: int, proc) -> None:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(f"memory child {side} {width}x{height} failed (exit {proc.returncode}): {proc.stderr[-400:]}")
    else:
        out[(side, width, height)] = json.loads(lines[-1])


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _field_bytes(renderer) -> int:
    """Bytes of the renderer's Taichi fields, gradients included (those allocated: `tape.grad_of`)."""
    from engine.autodiff.tape import grad_of

    total = 0
    for value in vars(renderer).values():
        for f in value if isinstance(value, list) else [value]:
            if hasattr(f, "snode") and hasattr(f, "dtype"):
                n = int(np.prod(f.shape)) * int(getattr(f, "n", 1) or 1) * int(getattr(f, "m", 1) or 1)
                size = n * (8 if "64" in str(f.dtype) else 4)
                total += size * (2 if grad_of(f) is not None else 1)
    return total


def memory_child(side: str, view: str, width: int, height: int, threads: int) -> dict:
    """In this (fresh) process: one warm iteration, reset the peak RSS, one more; the figures as a dict.
    view: an .npz of the camera values and the target (ours renders its own, the same)."""
    truth, theta = start_theta()
    out = {}
    if side == "drjit":
        from bench import drjit_render

        drjit_render.set_thread_count(threads)
        data = np.load(view)
        runner = Peer()
        runner.set_view(data["cam"], width, height, data["target"])
    else:
        from engine import backend

        backend.init("cpu")
        runner = Ours(width, height)  # fields of exactly this size: what a run at this size alone holds
        runner.set_view(width, height, truth)
    runner.iteration(theta)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = _status_bytes("VmRSS")
    runner.iteration(theta)
    out["growth"] = _status_bytes("VmHWM") - before
    out["peak"] = _status_bytes("VmHWM")
    if side == "ours":
        out["fields"] = _field_bytes(runner.r)
    return out


if __name__ == "__main__":
    side, view, *numbers = sys.argv[1:]
    print(json.dumps(memory_child(side, view, *(int(v) for v in numbers))))
