"""The scene parameter vector theta on the host: names, groups, units, perturbations, errors.

The components, their order and groups: `engine.scene_layout.THETA` (the one table; `T_*`, `N_THETA`
derive from it); device kinematics: `engine.kernels.kinematics`. Groups:

| group | components | unit | default perturbation |
|---|---|---|---|
| joints | yaw, shoulder, elbow, wrist | rad (shown in degrees) | +-20 degrees |
| gripper | grip (each finger's offset from the tool axis) | m | +-0.03 m |
| letter | tile_x, tile_y, tile_z (the moving tile's centre; perturbed along the table: x, z) | m ("units") | +-0.2 |
| letter_angles | tile_yaw, tile_tilt | rad (degrees) | +-10 degrees |
| albedo | paint_r..b, tile_r..b, letter_r..b | 1 | +-30 % |
| sun | sun_azimuth, sun_elevation | rad (degrees) | +-15 degrees |

A perturbation of magnitude M moves every component of its group by u * M with a random
sign and u uniform in [0.75, 1] (so "+-20 degrees" is at least 15 degrees on every
joint), seeded; albedos scale by (1 +- u * M) and stay in [0.02, 1].

    theta = robot_arm.theta_at(0.5)                      # app.scenes.robot_arm: theta of the timeline
    start = perturb(theta, {"joints": 20.0}, seed=1)     # degrees for angle groups
    errors = group_errors(start, theta)                  # {"joints": 19.3, ...} in display units
"""
from __future__ import annotations

import math

import numpy as np

from engine.errors import UserError
from engine import scene_layout as layout

NAMES: tuple[str, ...] = tuple(name for name, _, _ in layout.THETA)


def _group_slices() -> dict[str, slice]:
    """Each group's components, from engine.scene_layout.THETA (a group's components are contiguous there)."""
    out = {}
    for group in dict.fromkeys(g for _, g, _ in layout.THETA):
        at = [i for i, (_, g, _) in enumerate(layout.THETA) if g == group]
        assert at == list(range(at[0], at[-1] + 1)), f"theta: group {group} is not contiguous"
        out[group] = slice(at[0], at[-1] + 1)
    return out


GROUPS: dict[str, slice] = _group_slices()
ANGLE_GROUPS = ("joints", "letter_angles", "sun")  # radians inside, degrees in flags and reports
UNITS = {"joints": "deg", "gripper": "m", "letter": "units", "letter_angles": "deg", "albedo": "relative",
         "sun": "deg"}
DEFAULT_PERTURB: dict[str, float] = {"joints": 20.0, "gripper": 0.03, "letter": 0.2, "letter_angles": 10.0,
                                     "albedo": 0.3, "sun": 15.0}
ALBEDO_RANGE = (0.02, 1.0)
GRIP_RANGE = (0.15, 0.28)  # a finger's offset from the tool axis: the gripper closed on a tile .. fully open
SUN_ELEVATION_RANGE = (0.05, 1.5)  # radians: the sun stays above the horizon
TILE_LOWEST = layout.TABLE_TOP + layout.TILE_HALF[2]  # the tile's centre when it lies flat on the table

assert len(NAMES) == layout.N_THETA


def group_of(index: int) -> str:
    return next(name for name, part in GROUPS.items() if part.start <= index < part.stop)


def parse_perturb(text: str) -> dict[str, float]:
    """'joints=20,letter=0.2' -> {"joints": 20.0, "letter": 0.2}; 'default' -> DEFAULT_PERTURB; '' -> {}."""
    text = text.strip()
    if text == "default":
        return dict(DEFAULT_PERTURB)
    out: dict[str, float] = {}
    for item, name, magnitude in _assignments(text, "--perturb", "group", GROUPS, "GROUP=NUMBER, e.g. joints=20"):
        if magnitude < 0.0:
            raise UserError(f"--perturb '{item}': the magnitude must be a non-negative number")
        out[name] = magnitude
    return out


def _assignments(text: str, flag: str, what: str, known, expected: str):
    """(item, name, finite number) for each 'NAME=NUMBER' of a comma-separated flag value, or one UserError line."""
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name not in known:
            raise UserError(f"{flag} '{item}': unknown {what} '{name}' ({what}s: {', '.join(known)})")
        try:
            number = float(value)
        except ValueError:
            raise UserError(f"{flag} '{item}': expected {expected}") from None
        if not math.isfinite(number):
            raise UserError(f"{flag} '{item}': the value must be finite")
        yield item, name, number


def perturb(theta: np.ndarray, magnitudes: dict[str, float], seed: int) -> np.ndarray:
    """theta moved group by group (see the module docstring); reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    out = np.array(theta, np.float64)
    for name, part in GROUPS.items():  # every group draws, perturbed or not: a group's draw never depends on others'
        u = rng.uniform(0.75, 1.0, part.stop - part.start) * rng.choice([-1.0, 1.0], part.stop - part.start)
        magnitude = magnitudes.get(name, 0.0)
        if name == "letter":
            u[1] = 0.0  # on the table: x and z move, the height stays (lower would bury the tile in the table)
        if name in ANGLE_GROUPS:
            out[part] += np.radians(magnitude) * u
        elif name == "albedo":
            out[part] = np.clip(out[part] * (1.0 + magnitude * u), *ALBEDO_RANGE)
        else:
            out[part] += magnitude * u
    return out


def group_errors(theta: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Largest error per group in display units: degrees for angles, relative for albedos, else as stored."""
    theta, truth = np.asarray(theta, np.float64), np.asarray(truth, np.float64)
    out = {}
    for name, part in GROUPS.items():
        err = np.abs(theta[part] - truth[part])
        if name in ANGLE_GROUPS:
            err = np.degrees(err)
        elif name == "albedo":
            err = err / np.abs(truth[part])
        out[name] = float(err.max())
    return out


def limits() -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds per component (float32): optimisers clamp theta into them after each step."""
    lo = np.full(layout.N_THETA, -1e6, np.float32)
    hi = np.full(layout.N_THETA, 1e6, np.float32)
    lo[layout.T_GRIP], hi[layout.T_GRIP] = GRIP_RANGE
    lo[GROUPS["albedo"]], hi[GROUPS["albedo"]] = ALBEDO_RANGE
    lo[layout.T_SUN_ELEVATION], hi[layout.T_SUN_ELEVATION] = SUN_ELEVATION_RANGE
    lo[layout.T_TILE_POS + 1] = TILE_LOWEST  # the tile cannot sink into the table (to hide where it is wrong)
    return lo, hi


def parse_settings(text: str) -> dict[int, float]:
    """'yaw=10,tile_x=-0.9' -> {index: value in internal units} (angles given in degrees)."""
    out: dict[int, float] = {}
    for _, name, number in _assignments(text, "--set", "parameter", NAMES, "NAME=NUMBER, e.g. yaw=10"):
        index = NAMES.index(name)
        out[index] = math.radians(number) if group_of(index) in ANGLE_GROUPS else number
    return out


def display(index: int, value: float) -> float:
    """A component in display units: degrees for angles, else as stored."""
    return math.degrees(value) if group_of(index) in ANGLE_GROUPS else float(value)


def mask(groups: list[str] | tuple[str, ...]) -> np.ndarray:
    """1.0 on the components of `groups`, 0.0 elsewhere (which components an optimiser may move)."""
    out = np.zeros(layout.N_THETA, np.float32)
    for name in groups:
        out[GROUPS[name]] = 1.0
    return out
