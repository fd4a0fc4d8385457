"""The robot-arm timeline: keyframes, inverse and forward kinematics, the moving tile's pose.

A tile of the sign SHANNON (slot 2, the "A") has fallen forward onto its face in front
of the row. Over t in [0, 1] the arm leaves its rest pose, hovers over the fallen tile,
descends, grips it by its side edges, lifts it, swings back over the row while its
wrist pitches the tile upright, lowers it into its slot, lets go, backs away and
returns to rest.

Keyframes give the tool centre point (between the fingertips) in world space, the
tool's pitch and the finger opening; between keyframes they are blended with a
smoothstep. Each frame the joint angles come from analytic inverse kinematics (base
yaw, shoulder, elbow, wrist pitch; elbow up) and the drawn arm from forward
kinematics of those angles. While gripped, the tile rides rigidly in the tool frame.
The kernel (engine/kernels/raymarch.py) only evaluates geometry and shading.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import scene_layout as layout
from engine.render import Camera, SceneParams

__all__ = ["Camera", "SceneParams", "scene_at", "Pose", "solve_ik", "forward_kinematics",
           "tool_frame", "slot_center", "FALLEN_CENTER", "GRIP_T", "RELEASE_T", "KEYFRAMES", "MOVING_SLOT",
           "theta_at", "theta_from_scene", "scene_from_theta"]

BASE_XZ = layout.BASE_XZ  # directly behind the fallen tile's slot
SHOULDER = np.array(layout.SHOULDER)  # shoulder axis in the arm plane (forward, height)
UPPER, FORE = layout.UPPER, layout.FORE  # link lengths
TCP = layout.TCP_OFFSET
GRIP_OPEN = 0.26
GRIP_CLOSED = layout.TILE_HALF[0] + 0.009 + 0.004 + 0.003  # finger half-thickness + rounding + squeeze gap
MOVING_SLOT = layout.MOVING_SLOT


def slot_center(i: int) -> np.ndarray:
    return np.array([layout.SLOT_X0 + layout.SLOT_SPACING * i, layout.TILE_Y, layout.ROW_Z])


FALLEN_CENTER = np.array([slot_center(MOVING_SLOT)[0] + 0.1, layout.TABLE_TOP + layout.TILE_HALF[2], 0.15])


def _yaw_to(point: np.ndarray) -> float:
    return math.atan2(point[0] - BASE_XZ[0], point[2] - BASE_XZ[1])


def rot_y(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rot_x(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


# The tile fell forward onto its face, turned so that the arm can take it by its side edges.
FALLEN_ROT = rot_y(_yaw_to(FALLEN_CENTER)) @ rot_x(math.pi / 2)


@dataclass(frozen=True)
class Pose:
    """A keyframe: time, tool centre point (world), tool pitch (rad), finger offset."""

    t: float
    tcp: tuple[float, float, float]
    pitch: float
    grip: float


def _above(p: np.ndarray, dy: float) -> tuple[float, float, float]:
    return (float(p[0]), float(p[1] + dy), float(p[2]))


_S = slot_center(MOVING_SLOT)
_REST = Pose(0.0, (BASE_XZ[0] - 0.75, 1.45, BASE_XZ[1]), -0.5, GRIP_OPEN)
DOWN = -math.pi / 2
KEYFRAMES: tuple[Pose, ...] = (
    _REST,
    Pose(0.06, _REST.tcp, _REST.pitch, GRIP_OPEN),
    Pose(0.20, _above(FALLEN_CENTER, 0.55), DOWN, GRIP_OPEN),  # hover over the fallen tile
    Pose(0.28, _above(FALLEN_CENTER, 0.0), DOWN, GRIP_OPEN),  # fingers around it
    Pose(0.34, _above(FALLEN_CENTER, 0.0), DOWN, GRIP_CLOSED),  # gripped
    Pose(0.46, _above(FALLEN_CENTER, 0.75), DOWN, GRIP_CLOSED),  # lifted
    Pose(0.62, _above(_S, 0.55), 0.0, GRIP_CLOSED),  # upright, over its slot
    Pose(0.74, _above(_S, 0.0), 0.0, GRIP_CLOSED),  # in its slot
    Pose(0.80, _above(_S, 0.0), 0.0, GRIP_OPEN),  # released
    Pose(0.88, (float(_S[0]), float(_S[1] + 0.08), float(_S[2] - 0.32)), 0.0, GRIP_OPEN),  # backed away
    Pose(1.00, _REST.tcp, _REST.pitch, GRIP_OPEN),
)
GRIP_T = KEYFRAMES[4].t  # the fingers have closed on the tile
RELEASE_T = KEYFRAMES[8].t  # the fingers have opened with the tile in its slot


def _smoothstep(x: float) -> float:
    return x * x * (3.0 - 2.0 * x)


def tool_pose(t: float) -> tuple[np.ndarray, float, float]:
    """Tool centre point, pitch and finger offset at time t (clamped to [0, 1])."""
    t = min(max(float(t), 0.0), 1.0)
    for a, b in zip(KEYFRAMES, KEYFRAMES[1:]):
        if t <= b.t:
            w = _smoothstep((t - a.t) / (b.t - a.t))
            tcp = np.array(a.tcp) + (np.array(b.tcp) - np.array(a.tcp)) * w
            return tcp, a.pitch + (b.pitch - a.pitch) * w, a.grip + (b.grip - a.grip) * w
    last = KEYFRAMES[-1]
    return np.array(last.tcp), last.pitch, last.grip


def solve_ik(tcp: np.ndarray, pitch: float) -> dict[str, float]:
    """Joint angles (rad) that put the tool centre point at `tcp` with tool pitch `pitch`.

    yaw about +y (0 faces +z); shoulder from horizontal; elbow and wrist relative to the
    previous link; elbow-up solution. Unreachable targets are pulled onto the reach limit.
    """
    yaw = _yaw_to(tcp)
    reach = math.hypot(tcp[0] - BASE_XZ[0], tcp[2] - BASE_XZ[1])
    wrist = np.array([reach - TCP * math.cos(pitch), tcp[1] - TCP * math.sin(pitch)])
    v = wrist - SHOULDER
    d = min(max(float(np.linalg.norm(v)), abs(UPPER - FORE) + 1e-9), UPPER + FORE - 1e-9)
    cos_inner = (UPPER ** 2 + d ** 2 - FORE ** 2) / (2 * UPPER * d)
    shoulder = math.atan2(v[1], v[0]) + math.acos(min(max(cos_inner, -1.0), 1.0))
    elbow_pos = SHOULDER + UPPER * np.array([math.cos(shoulder), math.sin(shoulder)])
    to_wrist = wrist - elbow_pos
    elbow = math.atan2(to_wrist[1], to_wrist[0]) - shoulder
    return {"yaw": yaw, "shoulder": shoulder, "elbow": elbow, "wrist": pitch - shoulder - elbow}


def forward_kinematics(angles: dict[str, float]) -> dict[str, np.ndarray]:
    """Joint positions in the arm plane (forward, height), the tool pitch, and the TCP in world space."""
    a1 = angles["shoulder"]
    a2 = a1 + angles["elbow"]
    a3 = a2 + angles["wrist"]
    elbow = SHOULDER + UPPER * np.array([math.cos(a1), math.sin(a1)])
    wrist = elbow + FORE * np.array([math.cos(a2), math.sin(a2)])
    tcp2 = wrist + TCP * np.array([math.cos(a3), math.sin(a3)])
    yaw = angles["yaw"]
    tcp = np.array([BASE_XZ[0] + tcp2[0] * math.sin(yaw), tcp2[1], BASE_XZ[1] + tcp2[0] * math.cos(yaw)])
    return {"shoulder": SHOULDER.copy(), "elbow": elbow, "wrist": wrist, "pitch": a3, "tcp": tcp}


def tool_frame(yaw: float, pitch: float) -> np.ndarray:
    """Tool rotation (columns: lateral finger axis, tool 'up', approach direction) in world space."""
    forward = np.array([math.sin(yaw), 0.0, math.cos(yaw)])
    lateral = np.array([math.cos(yaw), 0.0, -math.sin(yaw)])
    approach = math.cos(pitch) * forward + math.sin(pitch) * np.array([0.0, 1.0, 0.0])
    return np.column_stack([lateral, np.cross(approach, lateral), approach])


def _grasp_offset() -> tuple[np.ndarray, np.ndarray]:
    """The tile's pose in the tool frame at the moment the fingers close."""
    tcp, pitch, _ = tool_pose(GRIP_T)
    frame = tool_frame(solve_ik(tcp, pitch)["yaw"], pitch)
    return frame.T @ (FALLEN_CENTER - tcp), frame.T @ FALLEN_ROT


_OFFSET_POS, _OFFSET_ROT = _grasp_offset()


def scene_at(t: float) -> SceneParams:
    """Everything the kernel needs for time t in [0, 1] (clamped)."""
    tcp_target, pitch, grip = tool_pose(t)
    angles = solve_ik(tcp_target, pitch)
    fk = forward_kinematics(angles)
    frame = tool_frame(angles["yaw"], fk["pitch"])
    if t < GRIP_T:
        tile_pos, tile_rot = FALLEN_CENTER.copy(), FALLEN_ROT.copy()
    elif t <= RELEASE_T:
        tile_pos, tile_rot = fk["tcp"] + frame @ _OFFSET_POS, frame @ _OFFSET_ROT
    else:
        tile_pos, tile_rot = slot_center(MOVING_SLOT), np.eye(3)
    return SceneParams(
        base_xz=BASE_XZ, yaw=angles["yaw"], shoulder=fk["shoulder"], elbow=fk["elbow"], wrist=fk["wrist"],
        tool_pitch=fk["pitch"], grip=grip, tile_pos=tile_pos, tile_rot=tile_rot,
        extra={"angles": angles, "tcp": fk["tcp"], "tool_frame": frame},
    )


def theta_from_scene(scene: SceneParams) -> np.ndarray:
    """The scene parameters theta (layout engine.scene_layout.T_*) of a frame made by `scene_at`."""
    theta = np.zeros(layout.N_THETA, np.float64)
    angles = scene.extra["angles"]
    theta[[layout.T_YAW, layout.T_SHOULDER, layout.T_ELBOW, layout.T_WRIST]] = [angles[k] for k in ("yaw", "shoulder", "elbow",
                                                                                         "wrist")]
    theta[layout.T_GRIP] = scene.grip
    theta[layout.T_TILE_POS:layout.T_TILE_POS + 3] = scene.tile_pos
    rot = np.asarray(scene.tile_rot)  # rot_y(yaw) @ rot_x(tilt), whatever the timeline did to the tile
    theta[layout.T_TILE_YAW] = math.atan2(-rot[2, 0], rot[0, 0])
    theta[layout.T_TILE_TILT] = math.atan2(-rot[1, 2], rot[1, 1])
    theta[layout.T_PAINT:layout.T_LETTER + 3] = np.asarray(scene.albedos, np.float64).reshape(9)
    sun = np.asarray(scene.sun, np.float64) / np.linalg.norm(scene.sun)
    theta[layout.T_SUN_AZIMUTH] = math.atan2(sun[0], sun[2])
    theta[layout.T_SUN_ELEVATION] = math.asin(sun[1])
    return theta


def theta_at(t: float) -> np.ndarray:
    """theta of the timeline's frame at t (the target of inverse rendering)."""
    return theta_from_scene(scene_at(t))


def scene_from_theta(theta: np.ndarray) -> SceneParams:
    """The frame theta describes, with its kinematics on the host (what the forward renderer draws):
    the device's `engine.kernels.kinematics.scene_from_theta` computes the same in float32."""
    theta = np.asarray(theta, np.float64)
    angles = {"yaw": theta[layout.T_YAW], "shoulder": theta[layout.T_SHOULDER], "elbow": theta[layout.T_ELBOW],
              "wrist": theta[layout.T_WRIST]}
    fk = forward_kinematics(angles)
    el, az = theta[layout.T_SUN_ELEVATION], theta[layout.T_SUN_AZIMUTH]
    return SceneParams(
        base_xz=BASE_XZ, yaw=float(angles["yaw"]), shoulder=fk["shoulder"], elbow=fk["elbow"], wrist=fk["wrist"],
        tool_pitch=float(fk["pitch"]), grip=float(theta[layout.T_GRIP]),
        tile_pos=theta[layout.T_TILE_POS:layout.T_TILE_POS + 3].copy(),
        tile_rot=rot_y(theta[layout.T_TILE_YAW]) @ rot_x(theta[layout.T_TILE_TILT]),
        albedos=tuple(tuple(theta[layout.T_PAINT + 3 * i:layout.T_PAINT + 3 * i + 3]) for i in range(3)),
        sun=(math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)),
        extra={"angles": angles, "tcp": fk["tcp"], "tool_frame": tool_frame(angles["yaw"], fk["pitch"])},
    )


_renderers = {}  # lanes -> Renderer (raymarch_frame)


def raymarch_frame(t: float, width: int, height: int, azimuth: float = Camera.azimuth,
                   elevation: float = Camera.elevation, distance: float = Camera.distance,
                   target: tuple[float, float, float] = Camera.target, lanes: int = 0) -> dict[str, np.ndarray]:
    """The parity computation "raymarch_frame": one frame on this process's backend (orbit camera around `target`).

    Returns linear RGB, depth, normals and march steps, and `ms`, the render time (never the
    compile: the first call compiles on a 32x32 frame); the renderer (and its compiled kernel)
    is kept between calls, resized when the size changes. lanes: pixels per thread (0: the backend's packet
    width, `engine.kernels.lanes.lanes_for`).
    """
    from engine.render import Renderer

    width, height, lanes = int(width), int(height), int(lanes)
    renderer = _renderers.get(lanes)
    if renderer is None:
        renderer = _renderers[lanes] = Renderer(32, 32, lanes=lanes or None)
        renderer.render(scene_at(float(t)), Camera())  # compiles (the size does not matter to it)
    renderer.resize(width, height)
    camera = Camera(azimuth=float(azimuth), elevation=float(elevation), distance=float(distance),
                    target=tuple(float(v) for v in target))
    rgb = renderer.render(scene_at(float(t)), camera)
    return {"rgb": rgb, **renderer.aovs(), "ms": np.float64(renderer.last_ms)}
