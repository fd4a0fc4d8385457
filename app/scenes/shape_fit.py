"""Shape fit: an icosphere shrink-wraps onto a target mesh with Chamfer (through the BVH) + Adam.

The reusable loop the CLI, the headless claims and the GUI drive:

    fit = ShapeFit("spot", subdiv=4)             # a name or any mesh path; the recommended settings
    fit = ShapeFit("blub", subdiv=4, lr=0.01, smooth=0.2, smooth_end=None)   # a constant smoothing step
    fit = ShapeFit("spot", losses={"chamfer": 1.0, "edge": 0.5})   # a weighted sum of loss terms
    for _ in range(400):
        fit.step()                 # one iteration; it waits on the device only every `sync_every`-th
    fit.losses                     # every loss so far (list of float; reads the ones not yet read)
    fit.vertices(), fit.faces      # current mesh, in the target's normalised frame
    fit.target                     # engine.mesh_io.Mesh (normalised) the fit chases
    fit.tape.entries               # the last iteration's launches (tape inspector)
    fit.export_mesh("final.obj")   # in the target file's original coordinates (.obj .ply .stl .glb)
    fit.destroy()

The loss is a weighted sum (engine.fit_loss.WeightedSum) of the terms `losses` names, built from
the table app.scenes.fit_settings.LOSS_TERMS; by default Chamfer alone (`fit.terms["chamfer"]`).
One iteration (`step`): each term's untaped work (Chamfer: refit the source BVH and find both
directions' closest points), the terms and their weighted sum recorded on the tape,
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

The host reads the losses every `sync_every` iterations (default SYNC_EVERY), many in one wait: between reads
an iteration only queues launches and each loss goes into a device array (`WeightedSum.history`), so a GPU never
idles waiting for the host (issue 29). `fit.losses` reads what is not read yet; `fit.losses_read` does not wait.
A fit whose loss becomes NaN or infinite raises `FitDiverged` (a `UserError`) from the read that finds it (a
`step` every `sync_every`-th, `losses`, `read_losses`), naming the first such iteration.
A whole run with its files (the `fit` command, and `run_fit` for scripts): `app.scenes.fit_run`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np
import taichi as ti

from app.scenes.fit_settings import (ASSETS, DEFAULT_WEIGHTS, LOSS_TERMS, MAX_SYNC_EVERY, RECOMMENDED_ITERS,
                                     RECOMMENDED_LR, RECOMMENDED_SMOOTH, RECOMMENDED_SMOOTH_END, REAL_TARGETS,
                                     SYNC_EVERY, TARGETS, check_int, check_subdiv_lr_smooth, check_weights)
from engine import backend
from engine.autodiff.tape import Tape
from engine.chamfer_loss import LaplacianSmoother
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.fit_loss import FitInputs, Loss, WeightedSum, build_term
from engine.mesh_io import Mesh, load_mesh, make_mesh, write_mesh
from engine.optim import Adam
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


class FitDiverged(UserError):
    """The loss became NaN or infinite at `iteration`: the fit cannot go on (lower the learning rate)."""

    def __init__(self, iteration: int, loss: float):
        super().__init__(f"the fit diverged at iteration {iteration} (loss {loss}): lower --lr")
        self.iteration, self.loss = iteration, loss


class ShapeFit:
    """One shape-fitting run on the current backend: an icosphere, its loss (Chamfer to `target`), Adam, smoothing.

    The defaults are the recommended settings (app/scenes/fit_settings.py), the ones the `fit`
    command, the desktop app and the `real_mesh_fit` claim start from; they were measured on
    subdivisions 3-4 (a strong early shrink-wrap collapses a 42-vertex sphere: take `smooth=0.1`
    or less below subdivision 2).

    Args:
        target: a built-in target (`blob`, `torus`, `spot`, `blub`, `penguin`) or a mesh file path
            (OBJ, PLY, STL, OFF, GLB); it is normalised into [-1, 1]^3.
        subdiv: icosphere subdivision, 0..5 (12 to 10,242 vertices).
        lr: Adam's learning rate.
        smooth, smooth_end: the Laplacian shrink-wrap step after each update, in 0..1; it falls
            linearly from `smooth` to `smooth_end` over `schedule_iters` iterations, and stays at
            `smooth` with `smooth_end=None`. `smooth=0.0, smooth_end=None`: no smoothing.
        seed: the target surface samples' seed. n_samples: how many (default: `default_samples`).
        profile: time every launch on the tape (`self.tape.entries`), for the tape inspector.
        losses: loss term -> weight (terms: app.scenes.fit_settings.LOSS_TERMS; a term not named is not
            built); default: each term's default weight, Chamfer alone.
        sync_every: read the losses from the device every this many steps, in one wait (1: every step).

    Attributes:
        x: the vertices, a Taichi vec3 float32 field (V,) with `needs_grad`; `x.grad` holds the last
            gradient. faces (np.ndarray): (F, 3) int. losses (list[float]): every loss so far (reading the
            ones not read yet: one wait); losses_read: those read, without waiting.
        target (engine.mesh_io.Mesh): the normalised target. tape: the last iteration's launches.
        loss (engine.fit_loss.WeightedSum): the loss, `loss.value` its 0-d field; terms (dict): each term
        built (weight > 0) by name; weights (dict): every term's weight, in the table's order.

    Raises:
        UserError: a bad setting (named as the `fit` flag), an unknown target or an unreadable mesh
            file; `FitDiverged` (a UserError) from the read of a loss that is NaN or infinite.

    A whole program: examples/fit_sphere_to_mesh.py.

    Example:
        >>> from engine import backend
        >>> _ = backend.init("cpu")
        >>> fit = ShapeFit("spot", subdiv=3)
        >>> for _ in range(30):
        ...     fit.step()                          # one iteration; a wait on the device every 10th
        >>> fit.iteration, len(fit.losses), fit.vertices().shape, fit.orders() > 1.0, fit.misses()
        (30, 30, (642, 3), True, 0)
        >>> fit.destroy()
    """

    def __init__(self, target: str | Path, subdiv: int = 3, lr: float = RECOMMENDED_LR, smooth: float = RECOMMENDED_SMOOTH,
                 seed: int = 0, n_samples: int | None = None, profile: bool = False,
                 smooth_end: float | None = RECOMMENDED_SMOOTH_END, schedule_iters: int = RECOMMENDED_ITERS,
                 losses: Mapping[str, float] | None = None, sync_every: int = SYNC_EVERY):
        check_subdiv_lr_smooth(subdiv, lr, smooth, smooth_end)
        check_int("--sync-every", sync_every, 1, MAX_SYNC_EVERY)
        self.sync_every = int(sync_every)
        losses = DEFAULT_WEIGHTS if losses is None else losses
        check_weights(losses)
        self.weights = {term.name: float(losses.get(term.name, 0.0)) for term in LOSS_TERMS}
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
        inputs = FitInputs(self.x, self.faces, self.target, self.n_samples, seed)
        self.terms: dict[str, Loss] = {}
        for term in LOSS_TERMS:  # the table's order is the sum's: the same weights give the same bits
            if self.weights[term.name] > 0:
                self.terms[term.name] = build_term(term.loss, inputs)
        self.loss = WeightedSum([(self.weights[name], loss) for name, loss in self.terms.items()],
                                history=self.sync_every)
        self.optimiser = Adam([self.x], lr=lr)
        self.smoother = LaplacianSmoother(self.x, self.faces) if max(smooth, self.smooth_end) > 0 else None
        self.tape = Tape(profile=profile)
        self.losses_read: list[float] = []  # the losses of the first steps, read from the device
        self._unread = 0  # steps since the last read: their losses are in self.loss.history[:_unread]

    @property
    def iteration(self) -> int:
        return len(self.losses_read) + self._unread

    @property
    def losses(self) -> list[float]:
        """Every loss so far, one per step (the loss before that step's update): reads those not read yet."""
        return self.read_losses()

    def read_losses(self) -> list[float]:
        """Read the losses of the steps since the last read from the device, in one wait, and return every loss.

        Raises `FitDiverged` at the first of them that is NaN or infinite (the losses then end before it)."""
        if self._unread:
            values, first = self.loss.history.to_numpy()[:self._unread], len(self.losses_read)
            self._unread = 0
            bad = np.flatnonzero(~np.isfinite(values))
            self.losses_read.extend(float(value) for value in values[:bad[0] if bad.size else len(values)])
            if bad.size:
                raise FitDiverged(first + int(bad[0]), float(values[bad[0]]))
        return self.losses_read

    def smoothing(self) -> float:
        """This iteration's Laplacian step size: `smooth` -> `smooth_end`, linear over `schedule_iters`."""
        t = min(self.iteration / (self.schedule_iters - 1), 1.0)
        return self.smooth + (self.smooth_end - self.smooth) * t

    def _evaluate(self, look: bool = False, slot: int = -1) -> None:
        self.tape.reset()
        with self.tape:
            self.loss.correspond(look)
            self.loss.record(self.tape, slot)
        self.tape.backward(self.loss.value)

    def evaluate(self, look: bool = False) -> float:
        """Loss and gradient (in `self.x.grad`) at the current vertices, without updating them; waits for the loss.

        `look`: leave the terms' schedules (Chamfer's re-sorts) where they were (see `gradient`)."""
        self._evaluate(look)
        return float(self.loss.value[None])

    def step(self) -> None:
        """One iteration (see the module docstring): launches only, except every `sync_every`-th step, which reads
        the losses (`read_losses`: it raises `FitDiverged` for a NaN or infinite one)."""
        self._evaluate(slot=self._unread)
        self.optimiser.step()
        if self.smoother is not None:
            self.smoother.step(self.smoothing())
        self._unread += 1
        if self._unread == self.sync_every:
            self.read_losses()

    def gradient(self) -> np.ndarray:
        """d loss / d vertices (V, 3) at the current vertices (the GUI's parity view uses it).

        A look, not a step: the fit's re-sort schedule is left where it was, so the fit runs
        the same whether or not, and whenever, its gradient is looked at."""
        self.evaluate(look=True)
        return self.x.grad.to_numpy()

    def vertices(self) -> np.ndarray:
        """Current vertices (V, 3) in the target's normalised frame."""
        return self.x.to_numpy().astype(np.float64)

    def orders(self) -> float:
        """Orders of magnitude the loss fell: log10(first loss / last loss)."""
        losses = self.losses
        if len(losses) < 2 or losses[-1] <= 0:
            return 0.0
        return math.log10(losses[0] / losses[-1])

    def misses(self) -> int:
        return self.loss.misses()

    def export_mesh(self, path: str | Path) -> None:
        """The current mesh in the target file's original coordinates, written atomically (format by extension)."""
        write_mesh(path, self.target.to_original(self.vertices()), self.faces,
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
    program = backend.taichi_program()  # a re-initialised Taichi has freed the kept fit's fields
    key = (str(target), int(subdiv), int(n_samples), int(seed), program)  # the program compares by identity
    if _gradient_fit is None or _gradient_fit[0] != key:
        if _gradient_fit is not None and _gradient_fit[0][-1] is program:
            _gradient_fit[1].destroy()
        _gradient_fit = None  # a failed set-up keeps nothing
        _gradient_fit = (key, ShapeFit(key[0], key[1], smooth=0.0, smooth_end=None, n_samples=key[2] or None,
                                       seed=key[3]))  # the gradient only: no smoothing step to allocate
    fit = _gradient_fit[1]
    fit.x.from_numpy(np.asarray(vertices, np.float32))
    fit.loss.restart_at_current_vertices()
    return {"loss": np.array(fit.evaluate()), "grad": fit.x.grad.to_numpy(), "misses": np.array(fit.misses())}
