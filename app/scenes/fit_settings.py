"""The shape fit's built-in targets, recommended settings and `FitSettings`, without Taichi (the UI process imports them).

The recommended settings were measured best on the real targets (docs/RESULTS.md, claim
`real_mesh_fit`): Adam lr 0.03 and a Laplacian shrink-wrap step falling linearly from 0.8
to 0.1 over 400 iterations. The `fit` CLI, the desktop app and the claim start from them.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from pathlib import Path

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


@dataclass(frozen=True)
class FitSettings:
    """Everything one fit run needs, named as the `fit` flags (`--iters` is `iterations`).

    `smooth_end=None` keeps the Laplacian step constant at `smooth`; `samples=None` takes
    the default count (about two per source triangle); `arch=None` means $SHANNON_ARCH, else auto.
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
    arch: str | None = None

    def validate(self) -> "FitSettings":
        """Raise `UserError` (naming the flag) for settings no fit can run with; return self."""
        check_subdiv_lr_smooth(self.subdiv, self.lr, self.smooth, self.smooth_end)
        _check_int("--iters", self.iterations, 1, MAX_ITERS)
        _check_int("--seed", self.seed, 0, MAX_SEED)
        _check_int("--dump-every", self.dump_every, 0, MAX_ITERS)
        if self.samples is not None:
            _check_int("--samples", self.samples, 1, MAX_SAMPLES)
        if self.mesh_format not in MESH_FORMATS:
            raise UserError(f"--mesh-format must be one of {', '.join(MESH_FORMATS)}, got {self.mesh_format!r}")
        if not isinstance(self.target, str) or not self.target.strip():
            raise UserError("--target must name a built-in target or a mesh file")
        return self

    @classmethod
    def from_record(cls, record: dict, source: str = "fit.json") -> "FitSettings":
        """The settings a fit.json records (UserError naming `source` when it is not one)."""
        if not isinstance(record, dict) or "target" not in record:
            raise UserError(f"{source}: not a fit.json (no \"target\")")
        names = {f.name for f in fields(cls)} - {"arch"}
        settings = {name: record[name] for name in names if name in record}
        requested = (record.get("backend") or {}).get("requested") if isinstance(record.get("backend"), dict) else None
        try:
            return cls(**settings, arch=requested or None)
        except TypeError as exc:
            raise UserError(f"{source}: {exc}") from None


def _check_int(flag: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise UserError(f"{flag} must be an integer in {lo}..{hi:,}, got {value!r}")


def check_subdiv_lr_smooth(subdiv: int, lr: float, smooth: float, smooth_end: float | None = None) -> None:
    """UserError for a subdivision, learning rate or smoothing no fit can run with (named as the CLI flags)."""
    if isinstance(subdiv, bool) or not isinstance(subdiv, numbers.Integral) or not 0 <= subdiv <= MAX_SUBDIV:
        raise UserError(f"--subdiv must be an integer in 0..{MAX_SUBDIV}, got {subdiv!r}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not (lr > 0 and math.isfinite(lr)):
        raise UserError(f"--lr must be a positive number, got {lr}")
    for flag, value in (("--smooth", smooth), ("--smooth-end", smooth_end)):
        if value is not None and (not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0):
            raise UserError(f"{flag} must be in 0..1 (a Laplacian step size), got {value}")
