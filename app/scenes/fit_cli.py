"""Shrink-wrap an icosphere onto a target mesh (Chamfer through the BVH + Adam) and write the result.

Writes into --out: fit.json (settings, the backend that ran, every loss, status), final.obj
(or .ply/.stl/.glb: --mesh-format) in the target file's coordinates, loss.png and loss.svg
(log scale), with --dump-every K the mesh every K iterations in frames/, with --video a
progress.mp4. The loss is Chamfer, or a weighted sum of loss terms (`--edge-weight W` adds the
edge-length regulariser; the terms: app.scenes.fit_settings.LOSS_TERMS). `--config fit.json` runs
again with the settings a fit.json records (flags given beside it override them). Defaults are the
recommended settings.

Exit codes: 0 the loss fell; 1 the fit diverged (NaN, a 100-fold rise, or a loss ending
above its first value: fit.json says "diverged": true and where); 2 bad flags, target or
--out; 130 SIGINT/SIGTERM: the iteration in progress finishes and every file is written,
fit.json marked "interrupted": true. The work itself is `app.scenes.fit_run.run_fit`.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from app.flags import add_arch_argument
from app.scenes.fit_settings import (LOSS_TERMS, MAX_SUBDIV, MESH_FORMATS, RECOMMENDED_ITERS, RECOMMENDED_LR,
                                     RECOMMENDED_SMOOTH, RECOMMENDED_SMOOTH_END, SYNC_EVERY, TARGETS, FitSettings)
from engine.errors import Interrupted, UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `fit` flags (see the module docstring)."""
    what = parser.add_argument_group("what to fit")
    what.add_argument("--target", default=None, metavar="NAME|PATH",
                      help=f"{', '.join(TARGETS)}, or an OBJ/PLY/STL/OFF/GLB file (required unless --config gives it)")
    what.add_argument("--config", default=None, metavar="FIT_JSON",
                      help="run again with the settings of a fit.json; flags given beside it override them")
    how = parser.add_argument_group("settings")
    how.add_argument("--subdiv", type=int, default=None, metavar="S",
                     help=f"icosphere subdivision 0..{MAX_SUBDIV} (default 3: 642 vertices)")
    how.add_argument("--iters", type=int, default=None, dest="iterations", metavar="N",
                     help=f"iterations (default {RECOMMENDED_ITERS})")
    how.add_argument("--lr", type=float, default=None, help=f"Adam learning rate (default {RECOMMENDED_LR})")
    how.add_argument("--smooth", type=float, default=None, metavar="LAMBDA",
                     help="Laplacian shrink-wrap step after each update, 0..1, 0 for none "
                          f"(default {RECOMMENDED_SMOOTH}, falling to {RECOMMENDED_SMOOTH_END})")
    how.add_argument("--smooth-end", type=float, default=None, metavar="LAMBDA1",
                     help="let the step fall linearly from --smooth to this over --iters "
                          "(default: constant when --smooth is given)")
    how.add_argument("--samples", type=int, default=None, metavar="N",
                     help="target surface samples (default: max(4096, 2 F))")
    how.add_argument("--seed", type=int, default=None, metavar="S",
                     help="seed of the target samples, 0..2^32-1 (default 0)")
    how.add_argument("--sync-every", type=int, default=None, metavar="K",
                     help=f"read the losses from the device every K iterations, in one wait; the loss and divergence "
                          f"checks run then (default {SYNC_EVERY})")
    terms = parser.add_argument_group("loss terms", "the loss is the weighted sum of these terms (weight 0: off)")
    for term in LOSS_TERMS:
        terms.add_argument(f"--{term.name}-weight", type=float, default=None, metavar="W",
                           help=f"{term.about} (default {term.weight:g})")
    files = parser.add_argument_group("backend and files")
    add_arch_argument(files)
    files.add_argument("--out", default="out/fit", metavar="DIR", help="output folder (default out/fit)")
    files.add_argument("--dump-every", type=int, default=None, metavar="K",
                       help="write the mesh every K iterations (default 0: never)")
    files.add_argument("--mesh-format", choices=MESH_FORMATS, default=None,
                       help="format of final.* and frames/iter_*.* (default obj)")
    files.add_argument("--video", action="store_true", default=None,
                       help="also write progress.mp4, a preview of the mesh as it fits")


SETTING_FLAGS = ("target", "subdiv", "iterations", "lr", "samples", "seed", "sync_every", "dump_every", "mesh_format",
                 "video", "arch")  # FitSettings fields set by the flag of the same name (None: not given)


def settings_from(args: argparse.Namespace) -> FitSettings:
    """The run's settings: the defaults (the recommended ones) or --config's fit.json, overridden by the flags given.

    `--smooth` alone keeps the step constant; `--smooth-end` alone changes only where it ends."""
    base = FitSettings(target="")
    if args.config:
        base = _resolve_target(FitSettings.from_record(_read_config(args.config), f"--config {args.config}"),
                               Path(args.config))
    given = {name: getattr(args, name) for name in SETTING_FLAGS if getattr(args, name) is not None}
    if args.smooth is not None:
        given.update(smooth=args.smooth, smooth_end=args.smooth_end)
    elif args.smooth_end is not None:
        given.update(smooth_end=args.smooth_end)
    weights = {term.name: getattr(args, f"{term.name}_weight") for term in LOSS_TERMS}
    given["weights"] = {**base.weights, **{name: value for name, value in weights.items() if value is not None}}
    settings = replace(base, **given)
    if not settings.target:
        raise UserError("python -m app fit: the following arguments are required: --target (or --config FIT_JSON) "
                        "(see --help)")
    return settings


def _read_config(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"--config {path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"--config {path}: not JSON ({str(exc).splitlines()[0][:100]})") from None


def _resolve_target(settings: FitSettings, config: Path) -> FitSettings:
    """A relative target path in a fit.json that is not found from here is looked for beside the fit.json."""
    target = Path(settings.target)
    if target.suffix and not target.is_absolute() and not target.exists() and (config.parent / target).exists():
        return FitSettings(**{**settings.__dict__, "target": str(config.parent / target)})
    return settings


def run(args: argparse.Namespace) -> int:
    """`python -m app fit ...` (see the module docstring)."""
    from app.scenes.fit_run import run_fit
    from engine.interrupt import graceful_stop

    settings = settings_from(args)
    with graceful_stop() as stop:
        result = run_fit(settings, args.out, stop)
    if result.status == "interrupted":
        raise Interrupted(stop.signal_name, result.message)
    print(result.message)
    return result.exit_code
