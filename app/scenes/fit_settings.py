"""The shape fit's built-in targets, loss terms, recommended settings and `FitSettings`, without Taichi (the UI
process imports them).

The recommended settings were measured best on the real targets (docs/RESULTS.md, claim
`real_mesh_fit`): Adam lr 0.03 and a Laplacian shrink-wrap step falling linearly from 0.8
to 0.1 over 400 iterations. The `fit` CLI, the desktop app and the claim start from them.

The fit's loss is a weighted sum of the terms in `LOSS_TERMS` (engine.fit_loss). That table is the one
place a term is registered: the settings' `weights`, fit.json's "weights", the `fit` flags
`--NAME-weight` and the device classes the fit builds all come from its rows.
"""
from __future__ import annotations

import difflib
import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from engine.errors import UserError

# The real targets' meshes (and their attribution): assets/ beside app/ in a checkout, and at the same
# place relative to app/ in an installed wheel (shannon_autograd/assets, see pyproject.toml)
ASSETS = Path(__file__).resolve().parents[2] / "assets"
REAL_TARGETS = ("spot", "blub", "penguin")
TARGETS = ("blob", "torus", *REAL_TARGETS)
MAX_SUBDIV = 5  # icosphere subdivision: 10,242 vertices

RECOMMENDED_LR = 0.03
RECOMMENDED_SMOOTH = 0.8
RECOMMENDED_SMOOTH_END = 0.1
RECOMMENDED_ITERS = 400
MAX_ITERS = 1_000_000
MAX_SAMPLES = 10_000_000  # target surface samples: ~100 bytes each on the device
MAX_SEED = 2**32 - 1
MESH_FORMATS = ("obj", "ply", "stl", "glb")  # what a fitted mesh can be written as (engine.mesh_io.write_mesh)
# The fit reads its losses from the device every SYNC_EVERY iterations, in one wait (app.scenes.shape_fit): between
# reads an iteration only queues launches, so a GPU never idles on the host (issue 29)
SYNC_EVERY = 10
MAX_SYNC_EVERY = 10_000  # the losses not yet read live in a device array of this many slots at most


@dataclass(frozen=True)
class LossTerm:
    """One term of the fit's loss: its setting `weights[name]` (flag `--NAME-weight`), the engine class that
    computes it ("module:Class", an `engine.fit_loss.Loss` built by its `for_fit`), its default weight (0: off)
    and what it measures (the flag's help)."""

    name: str
    loss: str
    weight: float
    about: str


# The fit's loss terms, in the order the weighted sum adds them. A new term: its engine module and one row here.
LOSS_TERMS = (
    LossTerm("chamfer", "engine.chamfer_loss:ChamferLoss", 1.0,
             "symmetric Chamfer distance between the mesh and the target's surface"),
    LossTerm("edge", "engine.edge_loss:EdgeLengthLoss", 0.0,
             "mean squared edge length of the mesh, a regulariser (PyTorch3D's mesh_edge_loss)"),
)
DEFAULT_WEIGHTS = {term.name: term.weight for term in LOSS_TERMS}
WEIGHT_FLAGS = ", ".join(f"--{term.name}-weight" for term in LOSS_TERMS)


@dataclass(frozen=True)
class FitSettings:
    """Everything one fit run needs, named as the `fit` flags (`--iters` is `iterations`).

    `smooth_end=None` keeps the Laplacian step constant at `smooth`; `samples=None` takes
    the default count (about two per source triangle); `arch=None` means $SHANNON_ARCH, else auto.
    `weights` maps loss terms (`LOSS_TERMS`) to their weights; a term not named has weight 0.
    The defaults are the recommended settings. `validate()` raises `UserError` naming the flag;
    `from_record(fit_json)` reads the settings a fit.json was written with.

        FitSettings("spot", subdiv=4).validate()
    """

    target: str
    subdiv: int = 3
    iterations: int = RECOMMENDED_ITERS
    lr: float = RECOMMENDED_LR
    smooth: float = RECOMMENDED_SMOOTH
    smooth_end: float | None = RECOMMENDED_SMOOTH_END
    samples: int | None = None
    seed: int = 0
    dump_every: int = 0
    mesh_format: str = "obj"
    video: bool = False
    sync_every: int = SYNC_EVERY
    arch: str | None = None
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def validate(self) -> "FitSettings":
        """Raise `UserError` (naming the flag) for settings no fit can run with; return self."""
        check_subdiv_lr_smooth(self.subdiv, self.lr, self.smooth, self.smooth_end)
        check_weights(self.weights)
        check_int("--iters", self.iterations, 1, MAX_ITERS)
        check_int("--seed", self.seed, 0, MAX_SEED)
        check_int("--dump-every", self.dump_every, 0, MAX_ITERS)
        check_int("--sync-every", self.sync_every, 1, MAX_SYNC_EVERY)
        if self.samples is not None:
            check_int("--samples", self.samples, 1, MAX_SAMPLES)
        if self.mesh_format not in MESH_FORMATS:
            raise UserError(f"--mesh-format must be one of {', '.join(MESH_FORMATS)}, got {self.mesh_format!r}")
        if not isinstance(self.target, str) or not self.target.strip():
            raise UserError("--target must name a built-in target or a mesh file")
        return self

    @classmethod
    def from_record(cls, record: dict, source: str = "fit.json") -> "FitSettings":
        """The settings a fit.json records (UserError naming `source` when it is not one).

        Each field is checked as strictly as its flag: a wrong type or an out-of-range value is an
        error naming `source`, the field and what it must be (never quietly the default), and so is
        a field no fit.json has (a misspelt setting would otherwise be ignored)."""
        if not isinstance(record, dict) or "target" not in record:
            raise UserError(f"{source}: not a fit.json (no \"target\")")
        unknown = sorted(set(record) - RECORD_KEYS)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(RECORD_KEYS), n=1)
            hint = f" (did you mean \"{close[0]}\"?)" if close else f"; its settings are {', '.join(RECORD_SETTINGS)}"
            raise UserError(f"{source}: \"{unknown[0]}\" is not a field of a fit.json{hint}")
        for name, (flag, what, ok) in RECORD_SETTINGS.items():
            if name in record and not ok(record[name]):
                raise UserError(f"{source}: \"{name}\" must be {what} (as {flag}), got {_json_value(record[name])}")
        settings = {name: record[name] for name in RECORD_SETTINGS if name in record and name not in ("arch", "weights")}
        settings["weights"] = {**DEFAULT_WEIGHTS, **record.get("weights", {})}  # a term not named: its default
        backend = record.get("backend")
        if backend is not None and not (isinstance(backend, dict) and _arch_or_none(backend.get("requested"))):
            raise UserError(f"{source}: \"backend\" must be an object whose \"requested\" is one of "
                            f"{', '.join(ARCH_CHOICES)} or null (as --arch), got {_json_value(backend)}")
        arch = backend.get("requested") if isinstance(backend, dict) else record.get("arch")
        return cls(**settings, arch=arch or None)


def _json_value(value) -> str:
    """A config value as JSON writes it, and its JSON type: '"0.1" (a string)', 'true (a boolean)'."""
    kind = ("a boolean" if isinstance(value, bool) else "null" if value is None
            else "an integer" if isinstance(value, int) else "a number" if isinstance(value, float)
            else "a string" if isinstance(value, str) else "a list" if isinstance(value, list)
            else "an object" if isinstance(value, dict) else type(value).__name__)
    text = json.dumps(value, allow_nan=True, default=str)
    text = text if len(text) <= 60 else text[:57] + "..."
    return text if value is None else f"{text} ({kind})"


def _int_in(lo: int, hi: int, null: bool = False):
    return lambda v: (v is None and null) or (type(v) is int and lo <= v <= hi)


def _number_in(lo: float, hi: float, null: bool = False):
    return lambda v: (v is None and null) or (type(v) in (int, float) and lo <= v <= hi)


def _arch_or_none(value) -> bool:
    return value is None or (isinstance(value, str) and value in ARCH_CHOICES)


def _weight_ok(value) -> bool:
    return type(value) in (int, float) and value >= 0 and math.isfinite(value)


ARCH_CHOICES = ("auto", "cuda", "vulkan", "cpu")  # engine.backend.ARCH_CHOICES (not imported: no Taichi here)
# fit.json's settings: field -> (its flag, what it must be, the check); JSON integers only where the flag takes one
RECORD_SETTINGS = {
    "target": ("--target", "a built-in target's name or a mesh file's path (a non-empty string)",
               lambda v: isinstance(v, str) and bool(v.strip())),
    "subdiv": ("--subdiv", f"an integer in 0..{MAX_SUBDIV}", _int_in(0, MAX_SUBDIV)),
    "iterations": ("--iters", f"an integer in 1..{MAX_ITERS:,}", _int_in(1, MAX_ITERS)),
    "lr": ("--lr", "a positive number", lambda v: type(v) in (int, float) and v > 0 and math.isfinite(v)),
    "smooth": ("--smooth", "a number in 0..1", _number_in(0.0, 1.0)),
    "smooth_end": ("--smooth-end", "a number in 0..1 or null", _number_in(0.0, 1.0, null=True)),
    "samples": ("--samples", f"an integer in 1..{MAX_SAMPLES:,} or null", _int_in(1, MAX_SAMPLES, null=True)),
    "seed": ("--seed", f"an integer in 0..{MAX_SEED:,}", _int_in(0, MAX_SEED)),
    "dump_every": ("--dump-every", f"an integer in 0..{MAX_ITERS:,}", _int_in(0, MAX_ITERS)),
    "mesh_format": ("--mesh-format", f"one of {', '.join(MESH_FORMATS)}", lambda v: isinstance(v, str) and
                    v in MESH_FORMATS),
    "video": ("--video", "true or false", lambda v: isinstance(v, bool)),
    "sync_every": ("--sync-every", f"an integer in 1..{MAX_SYNC_EVERY:,}", _int_in(1, MAX_SYNC_EVERY)),
    "arch": ("--arch", f"one of {', '.join(ARCH_CHOICES)} or null", _arch_or_none),  # read where no "backend" is
    "weights": (WEIGHT_FLAGS, f"an object of loss weights (numbers >= 0) named {', '.join(DEFAULT_WEIGHTS)}",
                lambda v: isinstance(v, dict) and set(v) <= set(DEFAULT_WEIGHTS) and all(map(_weight_ok, v.values()))),
}
# what else app.scenes.fit_run writes into a fit.json (results, not settings: read by nothing here)
RECORD_RESULTS = ("status", "target_name", "backend", "vertices", "iterations_done", "wall_s", "orders", "misses",
                  "final_loss", "diverged", "diverged_at", "divergence", "interrupted", "signal", "losses", "files",
                  "launches_per_iteration", "host_syncs_per_iteration", "host_costs")  # engine.host_costs
RECORD_KEYS = frozenset(RECORD_SETTINGS) | frozenset(RECORD_RESULTS)


def check_int(flag: str, value, lo: int, hi: int) -> None:
    """UserError naming `flag` unless `value` is an integer (not a bool) in lo..hi."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise UserError(f"{flag} must be an integer in {lo}..{hi:,}, got {value!r}")


def check_subdiv_lr_smooth(subdiv: int, lr: float, smooth: float, smooth_end: float | None = None) -> None:
    """UserError for a subdivision, learning rate or smoothing no fit can run with (named as the CLI flags)."""
    if isinstance(subdiv, bool) or not isinstance(subdiv, numbers.Integral) or not 0 <= subdiv <= MAX_SUBDIV:
        raise UserError(f"--subdiv must be an integer in 0..{MAX_SUBDIV}, got {subdiv!r}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not (lr > 0 and math.isfinite(lr)):
        raise UserError(f"--lr must be a positive number, got {lr!r}")
    for flag, value in (("--smooth", smooth), ("--smooth-end", smooth_end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not 0.0 <= value <= 1.0):
            raise UserError(f"{flag} must be in 0..1 (a Laplacian step size), got {value!r}")


def check_weights(weights: Mapping[str, float]) -> None:
    """UserError for loss weights no fit can run with: an unknown term, a weight not a number >= 0, or none positive."""
    for name, value in weights.items():
        if name not in DEFAULT_WEIGHTS:
            raise UserError(f"unknown loss term '{name}': the terms are {', '.join(DEFAULT_WEIGHTS)}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value >= 0 and math.isfinite(value)):
            raise UserError(f"--{name}-weight must be a number >= 0, got {value!r}")
    if not any(value > 0 for value in weights.values()):
        raise UserError(f"every loss weight is 0 ({WEIGHT_FLAGS}): give at least one term a positive weight")
