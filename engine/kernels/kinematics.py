"""Scene parameters theta and their forward kinematics to the renderer's `Scene`, on the device.

theta is one flat float vector (layout `T_*` below; names and groups in
`engine.scene_theta`): the arm's joint angles (base yaw, shoulder, elbow, wrist pitch;
radians) and its gripper opening (metres: each finger's offset from the tool axis), the
moving letter tile's pose (centre x, y, z; yaw about +y and tilt about its own x axis,
radians: rotation rot_y(yaw) rot_x(tilt)), the albedos of the arm's paint, the tiles and
the letters (RGB), and the sun's azimuth and elevation (radians).

`scene_from_theta` is straight-line code (sin/cos of the angles, products and sums), so
Taichi differentiates it: the differentiable renderer calls it per pixel inside its taped
kernel, and the chain theta -> joint positions -> distances -> image is one reverse pass.
It uses the device's sin/cos, which round differently on LLVM and SPIR-V (last bits);
that is acceptable here because the differentiable path's parity goal is 1e-3 relative.
The forward renderer (`raymarch.render`) never calls it: its kinematics run on the host
(app.scenes.robot_arm) and it keeps its transcendental-free bit parity.
"""
import taichi as ti

from engine.kernels.raymarch import P_ALBEDO, P_BASE, P_CAM_POS, P_ELBOW, P_GRIP, P_PIXEL, P_SHOULDER, P_SUN, \
    P_TILE_POS, P_TILE_ROT, P_TOOL, P_WRIST, Scene
from engine.scene_layout import (BASE_XZ, FORE, N_THETA, SHOULDER, T_ELBOW, T_GRIP, T_LETTER, T_PAINT,  # the arm's geometry,
                                 T_SHOULDER, T_SUN_AZIMUTH, T_SUN_ELEVATION, T_TILE, T_TILE_POS, T_TILE_TILT,  # theta's layout
                                 T_TILE_YAW, T_WRIST, T_YAW, UPPER)

vec2 = ti.math.vec2
vec3 = ti.math.vec3
FINITE_F32, FINITE_F64 = 3.4028234663852886e38, 1.7976931348623157e308  # the largest finite values



@ti.func
def theta_vector(theta: ti.template()):
    """theta (a field of N_THETA) as a local vector."""
    return ti.Vector([theta[j] for j in ti.static(range(N_THETA))])


@ti.func
def theta_row(theta: ti.template(), row: ti.i32):
    """Row `row` of a (rows, N_THETA) field as a local vector."""
    return ti.Vector([theta[row, j] for j in ti.static(range(N_THETA))])


@ti.func
def theta_of(theta: ti.template(), row: ti.i32):
    """Row `row` of a (rows, N_THETA) field, or the whole of an (N_THETA,) field (then `row` is ignored).

    A field without gradient read this way is a constant to Taichi's adjoints: the untaped
    passes that want spatial gradients only read a shared, gradient-free copy of theta."""
    v = ti.Vector([0.0] * N_THETA, ti.f32)
    if ti.static(len(theta.shape) == 1):
        v = theta_vector(theta)
    else:
        v = theta_row(theta, row)
    return v


@ti.func
def scene_from_theta(v) -> Scene:
    """Forward kinematics: theta (vector of N_THETA) -> the renderer's per-frame Scene.

    Joint positions in the arm plane: elbow = shoulder + UPPER (cos a1, sin a1),
    wrist = elbow + FORE (cos a2, sin a2), tool direction (cos a3, sin a3), with
    a1 = shoulder, a2 = a1 + elbow, a3 = a2 + wrist (each joint relative to the last).
    """
    s = Scene()
    yaw = v[T_YAW]
    s.base = ti.math.vec4(BASE_XZ[0], BASE_XZ[1], ti.cos(yaw), ti.sin(yaw))
    a1 = v[T_SHOULDER]
    a2 = a1 + v[T_ELBOW]
    a3 = a2 + v[T_WRIST]
    s.shoulder = vec2(SHOULDER[0], SHOULDER[1])
    s.elbow = s.shoulder + UPPER * vec2(ti.cos(a1), ti.sin(a1))
    s.wrist = s.elbow + FORE * vec2(ti.cos(a2), ti.sin(a2))
    s.tool = vec2(ti.cos(a3), ti.sin(a3))
    s.grip = v[T_GRIP]
    s.tile_pos = vec3(v[T_TILE_POS], v[T_TILE_POS + 1], v[T_TILE_POS + 2])
    c, sn = ti.cos(v[T_TILE_YAW]), ti.sin(v[T_TILE_YAW])
    cb, sb = ti.cos(v[T_TILE_TILT]), ti.sin(v[T_TILE_TILT])
    # world -> tile: the transpose of rot_y(yaw) rot_x(tilt)
    s.tile_rot = ti.math.mat3([[c, 0.0, -sn], [sn * sb, cb, c * sb], [sn * cb, -sb, c * cb]])
    s.paint = vec3(v[T_PAINT], v[T_PAINT + 1], v[T_PAINT + 2])
    s.tile = vec3(v[T_TILE], v[T_TILE + 1], v[T_TILE + 2])
    s.letter = vec3(v[T_LETTER], v[T_LETTER + 1], v[T_LETTER + 2])
    ce, se = ti.cos(v[T_SUN_ELEVATION]), ti.sin(v[T_SUN_ELEVATION])
    s.sun = vec3(ce * ti.sin(v[T_SUN_AZIMUTH]), se, ce * ti.cos(v[T_SUN_AZIMUTH]))
    return s


@ti.kernel
def kinematics(theta: ti.template(), prm: ti.template()):
    """prm[P_BASE:N_PARAMS] = the packed Scene of theta (layout `raymarch.P_*`; the camera slots untouched).

    The forward kinematics alone, for tests (gradchecks, and equality with the host's
    packing of the same pose) and for anyone who wants the joint positions on the device.
    """
    for _ in range(1):
        pack_scene(theta, prm)


@ti.kernel
def pack_forward(theta: ti.template(), cam: ti.template(), prm: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    """prm = what the forward renderer (`raymarch.render`) reads: theta's packed Scene (`kinematics`) and the
    camera (cam: position, right, up, forward, pixel size; `raymarch_grad.N_CAM` values), packed on the device so
    that the differentiable render's forward-image comparison never waits for the host."""
    for _ in range(1):
        pack_scene(theta, prm)
        for j in ti.static(range(12)):  # position, right, up, forward: contiguous in both layouts
            prm[P_CAM_POS + j] = cam[j]
        prm[P_PIXEL] = cam[12]


@ti.func
def pack_scene(theta: ti.template(), prm: ti.template()):
    """prm[P_BASE:N_PARAMS] = the packed Scene of theta (a field or an array)."""
    s = scene_from_theta(theta_vector(theta))
    for j in ti.static(range(4)):
        prm[P_BASE + j] = s.base[j]
    for j in ti.static(range(2)):
        prm[P_SHOULDER + j] = s.shoulder[j]
        prm[P_ELBOW + j] = s.elbow[j]
        prm[P_WRIST + j] = s.wrist[j]
        prm[P_TOOL + j] = s.tool[j]
    prm[P_GRIP] = s.grip
    for j in ti.static(range(3)):
        prm[P_TILE_POS + j] = s.tile_pos[j]
        prm[P_ALBEDO + j] = s.paint[j]
        prm[P_ALBEDO + 3 + j] = s.tile[j]
        prm[P_ALBEDO + 6 + j] = s.letter[j]
        prm[P_SUN + j] = s.sun[j]
        for k in ti.static(range(3)):
            prm[P_TILE_ROT + 3 * j + k] = s.tile_rot[j, k]


@ti.kernel
def mask_gradient(theta: ti.template(), mask: ti.template(), loss: ti.template(), iterates: ti.template(),
                  row: ti.i32):
    """theta.grad *= mask (frozen components, mask 0, take no optimiser step), or theta.grad = 0 if the loss or
    any gradient component is not finite (the step then moves by the optimiser's momentum only);
    iterates[row, 0] = the loss, iterates[row, 1] = 1 where the gradient was discarded, else 0 (a record the host
    reads later, many rows in one wait: `engine.theta_adam.ThetaAdam.read`)."""
    ti.loop_config(serialize=True)
    for _ in range(1):
        finite = ti.abs(loss[None]) <= ti.f64(FINITE_F64)  # false for a NaN as for an infinity (fast_math is off)
        for j in range(N_THETA):
            finite = finite and ti.abs(theta.grad[j]) <= FINITE_F32
        for j in range(N_THETA):
            theta.grad[j] = theta.grad[j] * mask[j] if finite else 0.0
        iterates[row, 0] = ti.cast(loss[None], iterates.dtype)
        iterates[row, 1] = 0.0 if finite else 1.0


@ti.kernel
def clamp_theta(theta: ti.template(), lo: ti.template(), hi: ti.template(), iterates: ti.template(), row: ti.i32):
    """theta clamped into [lo, hi] component by component (projected steps: joint and material limits), and
    recorded: iterates[row, 2:] = theta (see mask_gradient)."""
    for j in range(N_THETA):
        theta[j] = ti.math.clamp(theta[j], lo[j], hi[j])
        iterates[row, 2 + j] = ti.cast(theta[j], iterates.dtype)
