"""The jobs of a batch as plain data (no Ray, no Taichi): what each task runs, its name and its folder.

    targets = find_targets(["meshes/", "spot"])            # a folder, a glob, a file or a built-in name
    grid = parse_grid(["lr=0.01,0.03", "seed=0..3"])        # {"lr": [0.01, 0.03], "seed": [0, 1, 2, 3]}
    parse_grid(["seed=0..10**9"], per_point=2)              # UserError: 2,000,000,002 jobs, over MAX_JOBS (counted first)
    jobs = fit_jobs(targets, grid, base={"subdiv": 3, ...}, arch="cpu", threads=1)
    jobs[0].name, fit_argv(jobs[0].settings, "cpu", "out/x")  # "spot/lr0.01_seed0", the `fit` flags
    fit_settings(jobs[0]).validate()                        # what `fit` would run with those flags
    jobs = invert_jobs(parse_grid(["seed=1..4"], INVERT_KEYS), base={"t": 0.1, ...}, arch="cpu", threads=1)
    frames = parse_timeline("0:1:240")                      # 240 times from 0 to 1
    jobs = render_jobs(frames, orbit=True, camera=..., size=(512, 256), per_task=8, arch="cpu", threads=1)

A fit job's settings are exactly the flags of a single `python -m app fit` (`fit_argv`), and an invert
job's those of `python -m app invert` (`invert_argv`), so a batch job and the single command run the
same code on the same settings and write the same files.

A batch is counted before any job (or any list of grid values) is made: a grid over `MAX_JOBS` jobs
(`batch --max-jobs`), or a timeline over `MAX_FRAMES` frames, is one error line, at once and in no memory
(`seed=0..10**12` used to be expanded and checked point by point: minutes, tens of GiB).
"""
from __future__ import annotations

import functools
import glob
import hashlib
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

from app.scenes.fit_settings import LOSS_TERMS, TARGETS, FitSettings
from engine.errors import UserError
from engine.mesh_io import FORMATS

FIT_KEYS = {"subdiv": int, "iters": int, "lr": float, "smooth": float, "smooth_end": float, "samples": int,
            "seed": int, **{f"{term.name}_weight": float for term in LOSS_TERMS}}
# ^ every setting of a fit job, as the `fit` flag of the same name (smooth_end: --smooth-end; each loss term's
# weight: --NAME-weight)
INVERT_KEYS = {"seed": int, "t": float, "iters": int, "lr": float, "starts": int, "lm_iters": int, "hops": int,
               "method": str, "search_evals": int}
# ^ what `batch invert --grid` sweeps (lm_iters is `invert --lm-iters`); each job is `python -m app invert`,
# with that command's defaults for what is not given
INVERT_FLAGS = (*INVERT_KEYS, "width", "height", "perturb")  # an invert job's settings: `invert` flags of these names
MAX_JOBS = 10_000  # jobs in one batch unless `--max-jobs` raises it: checking and planning 10,000 take seconds
MAX_FRAMES = 1_000_000  # frames of one batch render (its timeline is a list of times)


@dataclass(frozen=True)
class Job:
    kind: str  # "fit", "render" or "invert"
    name: str  # unique in the batch; also its folder under OUT/jobs/
    settings: dict = field(default_factory=dict)  # fit: FIT_KEYS + "target"; render: size, camera, frames; invert: INVERT_FLAGS
    arch: str = "auto"  # the backend asked for (as --arch)
    threads: int = 1  # the task's num_cpus, and Taichi's CPU threads in it


def _number(key: str, text: str, kind: type) -> list | range:
    """One grid value, or an inclusive integer range `a..b` (a `range`, not yet a list), as the setting's type."""
    try:
        if ".." in text:
            lo, hi = (int(part) for part in text.split(".."))
            if kind is not int or hi < lo:
                raise ValueError
            return range(lo, hi + 1)
        value = kind(text)
    except ValueError:
        raise UserError(f"--grid {key}: '{text}' is not {'an integer or a range a..b' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(value):
        raise UserError(f"--grid {key}: '{text}' is not a finite number")
    return [value]


def too_many_jobs(count: int, what: str, max_jobs: int, fewer: str = "sweep fewer values") -> UserError:
    """The one line for a batch of `count` jobs over the limit; `what` says how they were counted."""
    return UserError(f"this batch would run {count:,} jobs ({what}), more than --max-jobs {max_jobs:,}: "
                     f"{fewer}, or raise --max-jobs")


def parse_grid(items: list[str], keys: dict[str, type] = FIT_KEYS, per_point: int = 1,
               max_jobs: int = MAX_JOBS) -> dict[str, list]:
    """`["lr=0.01,0.03", "seed=0..3"]` -> {"lr": [0.01, 0.03], "seed": [0, 1, 2, 3]}, in the order given.

    `keys`: the settings a grid may sweep, with their types (FIT_KEYS, INVERT_KEYS). The jobs are
    counted first, per_point (a fit batch's targets) times the product of the values' counts, ranges
    by their length: over `max_jobs` it is `too_many_jobs`, before any list of values is made."""
    pieces: dict[str, list] = {}
    for item in items:
        key, _, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in keys or not values.strip():
            raise UserError(f"--grid '{item}': expected KEY=V1,V2,... with KEY one of {', '.join(keys)}")
        if key in pieces:
            raise UserError(f"--grid gives {key} twice")
        pieces[key] = [_number(key, text.strip(), keys[key]) for text in values.split(",")]
    sizes = {key: sum(piece.stop - piece.start if isinstance(piece, range) else 1 for piece in parts)
             for key, parts in pieces.items()}  # arithmetic: len() of a range past 2**63 raises
    count = per_point * math.prod(sizes.values())
    if count > max_jobs:
        what = " x ".join([*([f"{per_point:,} targets"] if per_point != 1 else []),
                           *(f"{n:,} {key} values" for key, n in sizes.items())])
        raise too_many_jobs(count, what, max_jobs)
    grid: dict[str, list] = {}
    for key, parts in pieces.items():
        grid[key] = [v for piece in parts for v in piece]
        if len(set(grid[key])) != len(grid[key]):
            raise UserError(f"--grid {key}: a value repeats")
    return grid


def find_targets(specs: list[str]) -> list[str]:
    """Target names and mesh paths from folders (their mesh files), globs, files and built-in names.

    A folder or glob takes every file with a mesh suffix, broken ones included: they become error
    rows. A path is kept as given (it is what fit.json records); a pattern that matches nothing is an error."""
    found: list[str] = []
    for spec in specs:
        if spec in TARGETS:
            matches = [spec]
        elif Path(spec).is_dir():
            matches = sorted(str(p) for p in Path(spec).iterdir() if p.is_file() and p.suffix[1:].lower() in FORMATS)
        elif glob.has_magic(spec):
            matches = sorted(p for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        elif Path(spec).is_file():
            matches = [spec]
        else:
            raise UserError(f"--targets {spec}: no such file, folder or target name (names: {', '.join(TARGETS)})")
        if not matches:
            raise UserError(f"--targets {spec}: no mesh file ({', '.join('.' + f for f in FORMATS)}) found there")
        found += [m for m in matches if m not in found]
    return found


MAX_LABEL = 64  # characters of a target's folder name (its stem, cut; a hash keeps cut names apart)


def folder_name(text: str) -> str:
    """`text` as one safe folder name: letters, digits and `+-_.` kept, anything else `_`, no leading dot.

    So a job folder always lies inside OUT/jobs/: a mesh named `...obj` (stem `..`), `.obj` (a hidden
    name), or one with a slash, a backslash, a newline or a control character cannot name another place."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "+-_.") else "_" for c in text).lstrip(".")
    return name[:MAX_LABEL] or "mesh"


def _target_labels(targets: list[str]) -> dict[str, str]:
    """A folder name per target: its file stem made safe (`folder_name`), made unique by a short hash of the
    path where those repeat (or where making it safe changed it: `a b` and `a_b` stay apart)."""
    stems = {t: folder_name(Path(t).stem or t) for t in targets}
    repeated = {s for s in stems.values() if list(stems.values()).count(s) > 1}
    changed = {t for t, s in stems.items() if s != (Path(t).stem or t)}
    return {t: f"{s}-{hashlib.sha1(str(Path(t).resolve()).encode()).hexdigest()[:6]}"
            if s in repeated or t in changed else s for t, s in stems.items()}


def _label(settings: dict) -> str:
    return "_".join(f"{key}{value:g}" if isinstance(value, float) else f"{key}{value}" for key, value in settings.items())


def _grid_points(grid: dict[str, list]) -> list[dict]:
    """Every combination of the grid's values, as {key: value} ([{}] for an empty grid: one job)."""
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]


def fit_jobs(targets: list[str], grid: dict[str, list], base: dict, arch: str, threads: int) -> list[Job]:
    """One job per target and grid point: `base` (FIT_KEYS, None for the fit's default) with the grid's values.

    Named TARGET/KEY1V1_KEY2V2 (TARGET/default without a grid)."""
    labels = _target_labels(targets)
    points = _grid_points(grid)
    return [Job("fit", f"{labels[t]}/{_label(point) or 'default'}", {"target": t, **base, **point}, arch, threads)
            for t in targets for point in points]


def input_file(job: Job) -> str | None:
    """The file a job reads, shipped to its task as bytes: a fit's target when it is a path (not a built-in name)."""
    target = job.settings.get("target") if job.kind == "fit" else None
    return None if target is None or target in TARGETS else str(target)


def fit_argv(settings: dict, arch: str, out: str | Path) -> list[str]:
    """The `python -m app fit` flags of a fit job's settings (settings left None take the fit's defaults)."""
    argv = ["--target", str(settings["target"])]
    for key in FIT_KEYS:
        if settings.get(key) is not None:
            argv += [f"--{key.replace('_', '-')}", str(settings[key])]
    return [*argv, "--arch", arch, "--out", str(out)]


@functools.lru_cache(maxsize=1)
def _fit_parser():
    """The `fit` command's parser, made once (a batch checks every grid point with it)."""
    from app.flags import OneLineParser
    from app.scenes import fit_cli

    parser = OneLineParser(prog="python -m app fit")
    fit_cli.add_arguments(parser)
    return parser


def fit_settings(job: Job) -> FitSettings:
    """The `FitSettings` the `fit` command makes of this job's flags (its own parser and `settings_from`)."""
    from app.scenes import fit_cli

    return fit_cli.settings_from(_fit_parser().parse_args(fit_argv(job.settings, job.arch, "-")))


def invert_jobs(grid: dict[str, list], base: dict, arch: str, threads: int) -> list[Job]:
    """One inverse rendering per grid point: `base` (INVERT_FLAGS) with the grid's values, named KEY1V1_KEY2V2."""
    points = _grid_points(grid)
    return [Job("invert", _label(point) or "default", {**base, **point}, arch, threads) for point in points]


def invert_argv(settings: dict, arch: str, out: str | Path) -> list[str]:
    """The `python -m app invert` flags of an invert job's settings."""
    argv = [item for key in INVERT_FLAGS if settings.get(key) is not None
            for item in (f"--{key.replace('_', '-')}", str(settings[key]))]
    return [*argv, "--arch", arch, "--out", str(out)]


def parse_timeline(text: str, max_frames: int = MAX_FRAMES) -> list[float]:
    """`START:STOP:COUNT` -> COUNT times from START to STOP inclusive (`T` alone: one time), all in 0..1.

    A COUNT over `max_frames` is refused before any list is made."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            times = [float(parts[0])]
        elif len(parts) == 3:
            start, stop, count = float(parts[0]), float(parts[1]), int(parts[2])
            if count < 1:
                raise ValueError
            if count > max_frames:
                raise UserError(f"--t '{text}': {count:,} frames, more than a batch renders ({max_frames:,})")
            times = [start + (stop - start) * i / max(count - 1, 1) for i in range(count)]
        else:
            raise ValueError
    except ValueError:
        raise UserError(f"--t '{text}': expected START:STOP:COUNT (e.g. 0:1:240) or one time T") from None
    if not all(0.0 <= t <= 1.0 for t in times):
        raise UserError(f"--t '{text}': times must lie in 0..1 (the timeline)")
    return times


def render_jobs(times: list[float], orbit: bool, camera: dict, size: tuple[int, int], per_task: int, arch: str,
                threads: int) -> list[Job]:
    """Frames split into tasks of `per_task` frames; with `orbit` the azimuth turns once around over the frames.

    `camera` holds azimuth, elevation and distance (the `render` flags); each frame is (index, t, azimuth)."""
    frames = [(i, t, camera["azimuth"] + (360.0 * i / len(times) if orbit else 0.0)) for i, t in enumerate(times)]
    chunks = [frames[i:i + per_task] for i in range(0, len(frames), per_task)]
    return [Job("render", f"frames_{chunk[0][0]:04d}-{chunk[-1][0]:04d}",
                {"width": size[0], "height": size[1], "elevation": camera["elevation"],
                 "distance": camera["distance"], "frames": chunk}, arch, threads) for chunk in chunks]


def frame_path(index: int) -> str:
    """Where frame `index` of a batch render goes, relative to the output folder (as `render --frames`)."""
    return f"frames/frame_{index:04d}.png"
