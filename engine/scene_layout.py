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

# ---- theta: the scene's parameters, one table (engine.scene_theta adds units, bounds, perturbations) ----
# (name, group, geometric), in theta's order. A geometric component moves a surface: the scene SDF reads it.
# Those come first, N_GEOMETRIC of them: the differentiable render keeps the SDF's Jacobian for theta's leading
# N_GEOMETRIC components only (engine.kernels.raymarch_grad), so a geometric component listed after a shading
# one would get a silently zero gradient; the assertion below refuses that order. A group's components are
# contiguous, and the kernels read a vector (the tile's position, an albedo) as consecutive components.
THETA = (
    ("yaw", "joints", True), ("shoulder", "joints", True), ("elbow", "joints", True), ("wrist", "joints", True),
    ("grip", "gripper", True),
    ("tile_x", "letter", True), ("tile_y", "letter", True), ("tile_z", "letter", True),
    ("tile_yaw", "letter_angles", True), ("tile_tilt", "letter_angles", True),
    ("paint_r", "albedo", False), ("paint_g", "albedo", False), ("paint_b", "albedo", False),
    ("tile_r", "albedo", False), ("tile_g", "albedo", False), ("tile_b", "albedo", False),
    ("letter_r", "albedo", False), ("letter_g", "albedo", False), ("letter_b", "albedo", False),
    ("sun_azimuth", "sun", False), ("sun_elevation", "sun", False),
)
_INDEX = {name: i for i, (name, _, _) in enumerate(THETA)}
T_YAW, T_SHOULDER, T_ELBOW, T_WRIST, T_GRIP = (_INDEX[n] for n in ("yaw", "shoulder", "elbow", "wrist", "grip"))
T_TILE_POS = _INDEX["tile_x"]  # x, y, z
T_TILE_YAW, T_TILE_TILT = _INDEX["tile_yaw"], _INDEX["tile_tilt"]
T_PAINT, T_TILE, T_LETTER = _INDEX["paint_r"], _INDEX["tile_r"], _INDEX["letter_r"]  # RGB each
T_SUN_AZIMUTH, T_SUN_ELEVATION = _INDEX["sun_azimuth"], _INDEX["sun_elevation"]
N_THETA = len(THETA)
N_GEOMETRIC = sum(geometric for _, _, geometric in THETA)
assert all(geometric for _, _, geometric in THETA[:N_GEOMETRIC]), "theta: geometric components first"
_VECTORS = (("tile_x", "tile_y", "tile_z"), ("paint_r", "paint_g", "paint_b"), ("tile_r", "tile_g", "tile_b"),
            ("letter_r", "letter_g", "letter_b"))
assert all(_INDEX[v[k]] == _INDEX[v[0]] + k for v in _VECTORS for k in range(3)), "theta: a vector's components in order"

# ---- the packed scene: the renderer's parameter array, one table ----
# (name, width), in order: what the host (engine.render.pack) and the device kinematics (engine.kernels.kinematics)
# write and the kernels read (engine.kernels.raymarch.load_scene, the camera in `render`); each name's offset is
# `PACKED_AT[name]` (raymarch's P_* constants). The two spare slots keep every offset where the compiled kernels
# (and Taichi's offline cache of them) have it.
PACKED = (
    ("cam_pos", 3), ("cam_right", 3), ("cam_up", 3), ("cam_fwd", 3),  # the camera: position, then the axes scaled
    ("base", 4), ("shoulder", 2), ("elbow", 2), ("wrist", 2),  # by tan(fov/2) (right also by the aspect)
    ("tool", 2), ("grip", 1), ("tile_pos", 3), ("tile_rot", 9), ("spare", 1), ("pixel", 1), ("spare", 1),
    ("albedo", 9), ("sun", 3),
)
PACKED_AT = {}
_offset = 0
for _name, _width in PACKED:
    PACKED_AT.setdefault(_name, _offset)
    _offset += _width
N_PACKED = _offset
