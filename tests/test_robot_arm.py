"""The robot-arm timeline on the host: IK/FK agree, the gripper reaches the fallen tile, the tile ends in its slot."""
import math

import numpy as np
import pytest

from app.scenes import robot_arm
from engine.kernels import raymarch


def tile_corners(pos: np.ndarray, rot: np.ndarray) -> np.ndarray:
    half = np.array(raymarch.TILE_HALF)
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], float)
    return pos + (signs * half) @ rot.T


@pytest.mark.parametrize("key", robot_arm.KEYFRAMES, ids=lambda k: f"t={k.t:g}")
def test_forward_kinematics_inverts_inverse_kinematics_at_every_keyframe(key):
    angles = robot_arm.solve_ik(np.array(key.tcp), key.pitch)
    fk = robot_arm.forward_kinematics(angles)
    np.testing.assert_allclose(fk["tcp"], key.tcp, atol=1e-12)
    assert fk["pitch"] == pytest.approx(key.pitch, abs=1e-12)
    assert np.linalg.norm(fk["elbow"] - fk["shoulder"]) == pytest.approx(robot_arm.UPPER, abs=1e-12)
    assert np.linalg.norm(fk["wrist"] - fk["elbow"]) == pytest.approx(robot_arm.FORE, abs=1e-12)


def test_ik_round_trip_on_random_reachable_targets():
    rng = np.random.default_rng(5)
    for _ in range(200):
        yaw, reach, height = rng.uniform(-2.5, 2.5), rng.uniform(0.5, 1.4), rng.uniform(0.4, 1.8)
        pitch = rng.uniform(-math.pi / 2, 0.3)
        tcp = np.array([robot_arm.BASE_XZ[0] + reach * math.sin(yaw), height,
                        robot_arm.BASE_XZ[1] + reach * math.cos(yaw)])
        fk = robot_arm.forward_kinematics(robot_arm.solve_ik(tcp, pitch))
        np.testing.assert_allclose(fk["tcp"], tcp, atol=1e-9)


def test_gripper_reaches_the_fallen_letter_at_the_grip_keyframe():
    for t in (robot_arm.KEYFRAMES[3].t, robot_arm.GRIP_T):  # fingers around it (open), then closed on it
        scene = robot_arm.scene_at(t)
        np.testing.assert_allclose(scene.extra["tcp"], robot_arm.FALLEN_CENTER, atol=1e-12)
    closed = robot_arm.scene_at(robot_arm.GRIP_T)
    # the fingers (half-thickness 0.009, rounding 0.004) touch the tile's side edges, not inside them
    assert raymarch.TILE_HALF[0] < closed.grip - 0.013 < raymarch.TILE_HALF[0] + 0.005
    assert robot_arm.scene_at(robot_arm.KEYFRAMES[3].t).grip > raymarch.TILE_HALF[0] + 0.05  # open on the way down
    # the fingers close across the tile's width: the tool's lateral axis is the tile's x axis
    np.testing.assert_allclose(closed.extra["tool_frame"][:, 0], robot_arm.FALLEN_ROT[:, 0], atol=1e-12)


def test_tile_rides_rigidly_in_the_gripper():
    for t in np.linspace(robot_arm.GRIP_T, robot_arm.RELEASE_T, 13):
        scene = robot_arm.scene_at(t)
        np.testing.assert_allclose(scene.tile_pos, scene.extra["tcp"], atol=1e-9)
        np.testing.assert_allclose(scene.tile_rot.T @ scene.tile_rot, np.eye(3), atol=1e-12)


def test_letter_ends_upright_in_its_slot():
    slot = robot_arm.slot_center(robot_arm.MOVING_SLOT)
    for t in (robot_arm.RELEASE_T, robot_arm.RELEASE_T + 1e-6, 0.9, 1.0):
        scene = robot_arm.scene_at(t)
        np.testing.assert_allclose(scene.tile_pos, slot, atol=1e-9)
        np.testing.assert_allclose(scene.tile_rot, np.eye(3), atol=1e-9)
    start = robot_arm.scene_at(0.0)
    np.testing.assert_allclose(start.tile_pos, robot_arm.FALLEN_CENTER)
    assert start.tile_rot[:, 2] @ np.array([0.0, -1.0, 0.0]) == pytest.approx(1.0)  # face down at the start


def test_tile_moves_continuously_and_clears_the_row():
    row_top = raymarch.TABLE_TOP + 2 * raymarch.TILE_HALF[1]
    previous = None
    for t in np.linspace(0.0, 1.0, 801):
        scene = robot_arm.scene_at(t)
        if previous is not None:
            assert np.linalg.norm(scene.tile_pos - previous) < 0.02, f"tile jumps at t={t:.4f}"
        previous = scene.tile_pos
        corners = tile_corners(scene.tile_pos, scene.tile_rot)
        assert corners[:, 1].min() >= raymarch.TABLE_TOP - 1e-9, f"tile below the table top at t={t:.4f}"
        near_row = abs(scene.tile_pos[2] - raymarch.ROW_Z) < 0.3
        in_slot_column = abs(scene.tile_pos[0] - robot_arm.slot_center(robot_arm.MOVING_SLOT)[0]) < 0.02
        if near_row and not in_slot_column:
            assert corners[:, 1].min() > row_top, f"tile passes through the row at t={t:.4f}"
