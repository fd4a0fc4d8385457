"""Shape fit: an icosphere shrink-wraps onto a target mesh with Chamfer (through the BVH) + Adam.

The reusable loop the CLI, the headless claims and the GUI drive:

    fit = ShapeFit("spot", subdiv=4, lr=0.01, smooth=0.2, seed=0)   # a name or any mesh path
    fit = ShapeFit("blub", subdiv=4, lr=0.03, smooth=0.8, smooth_end=0.1, schedule_iters=400)  # the recommended
    for _ in range(400):
        loss = fit.step()          # one iteration; returns the loss before the update
    fit.losses                     # every loss so far (list of float)
    fit.vertices(), fit.faces      # current mesh, in the target's normalised frame
    fit.target                     # engine.mesh_io.Mesh (normalised) the fit chases
    fit.tape.entries               # the last iteration's launches (tape inspector)
    fit.export_obj("final.obj")    # in the target file's original coordinates
    fit.destroy()

One iteration (`step`): refit the source BVH and find both directions' closest points
(untaped), record the held-distance kernels and fixed-order sums on the tape,
backward, one Adam step on the device, then (with `smooth` = lambda > 0) one Laplacian
shrink-wrap step x <- x + lambda (neighbour mean - x). The smoothing step pulls each
vertex towards its neighbours, which stops the sphere from "tenting": stretching flat
across a concavity while its vertices sit on the rims. With `smooth_end`, lambda falls
linearly from `smooth` to `smooth_end` over `schedule_iters` iterations: a strong
shrink-wrap early pulls the sheet into concavities (between legs, between fins) before
the surface settles, a weak one late lets it take the detail (measured in docs/RESULTS.md).

Targets: `blob` and `torus` (engine.meshgen), `spot`, `blub`, `penguin` (assets/*.obj),
or any OBJ/PLY/STL/OFF/GLB path; every target is normalised into [-1, 1]^3 and the
source starts as the unit icosphere.

CLI: python -m app fit --target NAME|PATH [--subdiv S] [--iters N] [--lr LR] [--smooth L]
     [--smooth-end L1] [--samples N] [--seed S] [--arch A] [--out DIR] [--dump-every K]
(defaults: the recommended settings of app.scenes.fit_settings)
writes DIR/fit.json, DIR/final.obj, DIR/loss.png and every K iterations DIR/frames/iter_NNNNN.obj.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import taichi as ti

from app.scenes.fit_settings import (ASSETS, MAX_SUBDIV, RECOMMENDED_ITERS, RECOMMENDED_LR, RECOMMENDED_SMOOTH,
                                     RECOMMENDED_SMOOTH_END, REAL_TARGETS, TARGETS)
from engine.autodiff.optim import Adam
from engine.autodiff.tape import Tape
from engine.chamfer import ChamferLoss, LaplacianSmoother
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.mesh_io import Mesh, load_mesh, make_mesh, write_obj
from engine import meshgen


def load_target(target: str | Path) -> Mesh:
    """A target by name (see TARGETS) or a mesh file path, normalised into [-1, 1]^3."""
    name = str(target)
    if name == "blob":
        return make_mesh(*meshgen.blob(4), "blob")
    if name == "torus":
        return make_mesh(*meshgen.torus(), "torus")
    if name in REAL_TARGETS:
        return load_mesh(ASSETS / f"{name}.obj")
    if not Path(name).suffix:
        raise UserError(f"unknown target '{name}': choose one of {', '.join(TARGETS)} or give a mesh file path")
    return load_mesh(name)


def default_samples(n_faces: int) -> int:
    """Target samples per run: about two per source triangle, at least 4,096 (measured in docs/RESULTS.md)."""
    return max(4096, 2 * n_faces)


def check_settings(subdiv: int, lr: float, smooth: float, smooth_end: float | None = None) -> None:
    """UserError for settings no fit can run with (named as the CLI flags)."""
    if isinstance(subdiv, bool) or not isinstance(subdiv, int) or not 0 <= subdiv <= MAX_SUBDIV:
        raise UserError(f"--subdiv must be an integer in 0..{MAX_SUBDIV}, got {subdiv!r}")
    if not (lr > 0 and math.isfinite(lr)):
        raise UserError(f"--lr must be a positive number, got {lr}")
    if not 0.0 <= smooth <= 1.0:
        raise UserError(f"--smooth must be in 0..1 (a Laplacian step size), got {smooth}")
    if smooth_end is not None and not 0.0 <= smooth_end <= 1.0:
        raise UserError(f"--smooth-end must be in 0..1 (a Laplacian step size), got {smooth_end}")


class ShapeFit:
    """One shape-fitting run on the current backend (see the module docstring)."""

    def __init__(self, target: str | Path, subdiv: int = 3, lr: float = 0.01, smooth: float = 0.0, seed: int = 0,
                 n_samples: int | None = None, profile: bool = False, smooth_end: float | None = None,
                 schedule_iters: int = 400):
        check_settings(subdiv, lr, smooth, smooth_end)
        self.target = load_target(target)
        self.target_name = str(target)
        self.subdiv, self.lr, self.smooth, self.seed = subdiv, lr, smooth, seed
        self.smooth_end = smooth if smooth_end is None else smooth_end
        self.schedule_iters = max(int(schedule_iters), 2)
        sphere, self.faces = meshgen.icosphere(subdiv)
        self.n_samples = n_samples or default_samples(len(self.faces))
        self.group = FieldGroup()
        self.x = self.group.vector(3, ti.f32, (len(sphere),), needs_grad=True)
        self.group.finalize()
        self.x.from_numpy(sphere.astype(np.float32))
        self.loss = ChamferLoss(self.x, self.faces, self.target, self.n_samples, seed)
        self.optimiser = Adam([self.x], lr=lr)
        self.smoother = LaplacianSmoother(self.x, self.faces) if max(smooth, self.smooth_end) > 0 else None
        self.tape = Tape(profile=profile)
        self.losses: list[float] = []

    @property
    def iteration(self) -> int:
        return len(self.losses)

    def smoothing(self) -> float:
        """This iteration's Laplacian step size: `smooth` -> `smooth_end`, linear over `schedule_iters`."""
        t = min(self.iteration / (self.schedule_iters - 1), 1.0)
        return self.smooth + (self.smooth_end - self.smooth) * t

    def evaluate(self) -> float:
        """Loss and gradient (in `self.x.grad`) at the current vertices, without updating them."""
        self.tape.reset()
        with self.tape:
            self.loss.correspond()
            self.loss.record(self.tape)
        self.tape.backward(self.loss.value)
        return float(self.loss.value[None])

    def step(self) -> float:
        """One iteration (see the module docstring); returns the loss before the update."""
        value = self.evaluate()
        if not math.isfinite(value):
            raise UserError(f"the fit diverged at iteration {self.iteration} (loss {value}): lower --lr")
        self.optimiser.step()
        if self.smoother is not None:
            self.smoother.step(self.smoothing())
        self.losses.append(value)
        return value

    def gradient(self) -> np.ndarray:
        """d loss / d vertices (V, 3) at the current vertices (the GUI's parity view uses it).

        A look, not a step: the fit's re-sort schedule is left where it was, so the fit runs
        the same whether or not, and whenever, its gradient is looked at."""
        calls = self.loss.correspondences
        self.evaluate()
        self.loss.correspondences = calls
        return self.x.grad.to_numpy()

    def vertices(self) -> np.ndarray:
        """Current vertices (V, 3) in the target's normalised frame."""
        return self.x.to_numpy().astype(np.float64)

    def orders(self) -> float:
        """Orders of magnitude the loss fell: log10(first loss / last loss)."""
        if len(self.losses) < 2 or self.losses[-1] <= 0:
            return 0.0
        return math.log10(self.losses[0] / self.losses[-1])

    def misses(self) -> int:
        return self.loss.misses()

    def export_obj(self, path: str | Path) -> None:
        """The current mesh in the target file's original coordinates, written atomically."""
        write_obj(path, self.target.to_original(self.vertices()), self.faces,
                  header=f"shape fit onto {self.target_name}, iteration {self.iteration}")

    def destroy(self) -> None:
        for part in (self.smoother, self.optimiser, self.loss):
            if part is not None:
                part.destroy()
        self.group.destroy()


_gradient_fit: tuple[tuple, "ShapeFit"] | None = None  # (key, fit) of fit_gradient_at, kept for the next call


def fit_gradient_at(target: np.ndarray, subdiv: np.ndarray, n_samples: np.ndarray, seed: np.ndarray,
                    vertices: np.ndarray) -> dict[str, np.ndarray]:
    """Parity computation: the Chamfer loss and its gradient for the fit's source mesh placed at
    `vertices` (V, 3), with the fit's target samples. Backend A runs the fit to iteration k and
    backend B evaluates at A's vertices, so the check compares gradients, not two trajectories
    (Adam amplifies last-bit differences: after 100 iterations two backends' meshes differ by ~1e-3).

    The fit is kept for the next call with the same target, subdivision, samples and seed (the
    app compares gradients every few seconds; a new fit costs seconds of set-up), and restarted
    at `vertices`, so each answer is bit for bit what a new fit would give."""
    global _gradient_fit
    program = id(ti.lang.impl.get_runtime().prog)  # a re-initialised Taichi has freed the kept fit's fields
    key = (str(target), int(subdiv), int(n_samples), int(seed), program)
    if _gradient_fit is None or _gradient_fit[0] != key:
        if _gradient_fit is not None and _gradient_fit[0][-1] == program:
            _gradient_fit[1].destroy()
        _gradient_fit = None  # a failed set-up keeps nothing
        _gradient_fit = (key, ShapeFit(key[0], key[1], n_samples=key[2] or None, seed=key[3]))
    fit = _gradient_fit[1]
    fit.x.from_numpy(np.asarray(vertices, np.float32))
    fit.loss.restart_at_current_vertices()
    return {"loss": np.array(fit.evaluate()), "grad": fit.x.grad.to_numpy(), "misses": np.array(fit.misses())}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other bad input
        raise UserError(f"python -m app fit: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    from app.cli import add_arch_argument

    parser = _Parser(prog="python -m app fit",
                                     description="Shrink-wrap an icosphere onto a target mesh (Chamfer through the BVH + Adam).")
    parser.add_argument("--target", required=True, metavar="NAME|PATH",
                        help=f"{', '.join(TARGETS)}, or an OBJ/PLY/STL/OFF/GLB file")
    parser.add_argument("--subdiv", type=int, default=3, help=f"icosphere subdivision 0..{MAX_SUBDIV} (default 3: 642 vertices)")
    parser.add_argument("--iters", type=int, default=RECOMMENDED_ITERS, help=f"iterations (default {RECOMMENDED_ITERS})")
    parser.add_argument("--lr", type=float, default=RECOMMENDED_LR, help=f"Adam learning rate (default {RECOMMENDED_LR})")
    parser.add_argument("--smooth", type=float, default=None, metavar="LAMBDA",
                        help="Laplacian shrink-wrap step after each update, 0..1, 0 for none "
                             f"(default {RECOMMENDED_SMOOTH}, falling to {RECOMMENDED_SMOOTH_END})")
    parser.add_argument("--smooth-end", type=float, default=None, metavar="LAMBDA1",
                        help="let the step fall linearly from --smooth to this over --iters "
                             "(default: constant when --smooth is given)")
    parser.add_argument("--samples", type=int, default=None, help="target surface samples (default: max(4096, 2 F))")
    parser.add_argument("--seed", type=int, default=0, help="seed of the target samples (default 0)")
    add_arch_argument(parser)
    parser.add_argument("--out", default="out/fit", help="output folder (default out/fit)")
    parser.add_argument("--dump-every", type=int, default=0, metavar="K", help="write a frame OBJ every K iterations")
    return parser


def main(argv: list[str]) -> int:
    """`python -m app fit ...` (see the module docstring)."""
    from app.plot import loss_curve_png
    from engine import atomic, backend
    from engine.progress import bar

    args = _parser().parse_args(argv)
    if args.smooth is None:
        args.smooth = RECOMMENDED_SMOOTH
        args.smooth_end = RECOMMENDED_SMOOTH_END if args.smooth_end is None else args.smooth_end
    if args.iters < 1:
        raise UserError(f"--iters must be at least 1, got {args.iters}")
    if args.dump_every < 0:
        raise UserError(f"--dump-every must be 0 (off) or positive, got {args.dump_every}")
    if args.samples is not None and args.samples < 1:
        raise UserError(f"--samples must be positive, got {args.samples}")
    check_settings(args.subdiv, args.lr, args.smooth, args.smooth_end)
    load_target(args.target)  # bad settings and targets fail before the backend starts
    running = backend.init(args.arch)
    out = Path(args.out)
    fit = ShapeFit(args.target, args.subdiv, args.lr, args.smooth, args.seed, args.samples,
                   smooth_end=args.smooth_end, schedule_iters=args.iters)
    started = time.perf_counter()
    progress = bar(total=args.iters, desc=f"fit {fit.target.name}")
    for i in range(args.iters):
        if args.dump_every and i % args.dump_every == 0:
            fit.export_obj(out / "frames" / f"iter_{i:05d}.obj")
        loss = fit.step()
        progress.set_postfix_str(f"loss {loss:.3e}", refresh=False)
        progress.update()
    progress.close()
    wall = time.perf_counter() - started
    fit.export_obj(out / "final.obj")
    title = f"Chamfer loss, {fit.target.name}, subdiv {args.subdiv}, {running.name}: {fit.orders():.2f} orders"
    loss_curve_png(out / "loss.png", fit.losses, title)
    record = {
        "target": args.target, "target_name": fit.target.name, "arch": running.name, "backend": running.as_record(),
        "subdiv": args.subdiv, "vertices": fit.x.shape[0], "iterations": args.iters, "lr": args.lr,
        "smooth": args.smooth, "smooth_end": fit.smooth_end, "samples": fit.n_samples, "seed": args.seed, "wall_s": round(wall, 3),
        "orders": fit.orders(), "misses": fit.misses(), "losses": fit.losses,
    }
    atomic.write_json(out / "fit.json", record)
    print(f"fit {fit.target.name} on {running.name}: {args.iters} iterations in {wall:.1f} s, loss "
          f"{fit.losses[0]:.3e} -> {fit.losses[-1]:.3e} ({fit.orders():.2f} orders), misses {fit.misses()}; "
          f"wrote {out}/fit.json, final.obj, loss.png")
    fit.destroy()
    return 0
