"""The robot-arm scene's layout, Taichi-free: where things stand, how long the arm's links are, how theta is laid out.

One definition for the device and the host: the kernels (`engine.kernels.raymarch`, `engine.kernels.kinematics`)
read these numbers, and so do the timeline's inverse kinematics (`app.scenes.robot_arm`) and theta's names and
bounds (`engine.scene_theta`), which must not import Taichi kernels to learn a table height.
Metres; y is up; the sign faces +z.
"""
from __future__ import annotations

# ---- the table and the letter tiles ----
TABLE_TOP = 0.8
TILE_HALF = (0.18, 0.23, 0.035)
TILE_ROUND = 0.02
SLOT_SPACING = 0.5
SLOT_X0 = -1.5  # x of slot 0
ROW_Z = -0.2
TILE_Y = TABLE_TOP + TILE_HALF[1]
N_SLOTS = 7
WORD = "SHANNON"
GLYPH = {"S": 0, "H": 1, "A": 2, "N": 3, "O": 4}
SLOT_GLYPHS = tuple(GLYPH[c] for c in WORD)
MOVING_SLOT = 2  # the tile that fell: the A

# ---- the arm's fixed geometry ----
BASE_XZ = (-0.5, -1.15)  # base axis on the floor, directly behind the fallen tile's slot
SHOULDER = (0.0, 1.0)  # shoulder axis in the arm plane (forward, height)
UPPER, FORE = 0.9, 0.8  # link lengths
TCP_OFFSET = 0.26  # wrist joint to the tool centre point (between the fingertips)

# ---- theta layout (engine.scene_theta names the slices) ----
T_YAW, T_SHOULDER, T_ELBOW, T_WRIST, T_GRIP = range(5)
T_TILE_POS = 5  # x, y, z
T_TILE_YAW, T_TILE_TILT = 8, 9
T_PAINT, T_TILE, T_LETTER = 10, 13, 16  # RGB each
T_SUN_AZIMUTH, T_SUN_ELEVATION = 19, 20
N_THETA = 21
