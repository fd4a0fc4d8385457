"""Host glue for the ray-marched scene: pack parameters, own the image buffers, launch, read back.

`SceneParams` is what the kernel needs for one frame (the arm's joint positions from
forward kinematics, the moving tile's pose), as plain numpy; `Camera` is the orbit
camera. `Renderer(width, height).render(scene, camera)` returns linear RGB (H, W, 3)
float32; depth, normals and march steps of the same frame are kept as AOVs.
Buffers are Taichi ndarrays, so `resize` reallocates without recompiling, and the
per-frame values travel in one small parameter array (no recompiles per frame).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from engine import backend
from engine.errors import UserError
from engine.kernels import raymarch
from engine.kernels.lanes import lanes_for
from engine.launch import launch

MAX_SIDE = 16384
MAX_DEPTH = raymarch.T_MAX  # depth AOV value where a ray escaped
MAX_STEPS = raymarch.MAX_STEPS  # upper limit of the steps AOV
BYTES_PER_PIXEL = 4 * (3 + 1 + 3 + 1)  # rgb, depth, normal, steps (float32 / int32)


@dataclass(frozen=True)
class Camera:
    """Orbit camera: angles in degrees; azimuth 0 looks at the sign's face (from +z)."""

    azimuth: float = 24.0
    elevation: float = 20.0
    distance: float = 4.7
    target: tuple[float, float, float] = (-0.3, 1.1, -0.45)
    fov_y: float = 36.0

    def position(self) -> np.ndarray:
        az, el = math.radians(self.azimuth), math.radians(self.elevation)
        offset = np.array([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)])
        return np.asarray(self.target, np.float64) + self.distance * offset

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit right, up and forward vectors."""
        forward = np.asarray(self.target, np.float64) - self.position()
        forward /= np.linalg.norm(forward)
        right = np.cross(forward, [0.0, 1.0, 0.0])
        right /= np.linalg.norm(right)
        return right, np.cross(right, forward), forward


@dataclass(frozen=True)
class SceneParams:
    """One frame of the scene. Joint positions are in the arm's plane: (forward distance, height)."""

    base_xz: tuple[float, float]
    yaw: float  # radians, about +y, 0 = the arm faces +z
    shoulder: np.ndarray
    elbow: np.ndarray
    wrist: np.ndarray
    tool_pitch: float  # radians, 0 = tool points forward, -pi/2 = down
    grip: float  # lateral offset of each finger from the tool axis
    tile_pos: np.ndarray  # centre of the moving tile (3)
    tile_rot: np.ndarray  # tile -> world rotation (3x3)
    # RGB of the arm's paint, tiles, letters
    albedos: tuple = (raymarch.ALBEDO_PAINT, raymarch.ALBEDO_TILE, raymarch.ALBEDO_LETTER)
    sun: tuple = raymarch.KEY_DIR  # direction towards the key light
    extra: dict = field(default_factory=dict)  # host-side extras (joint angles, tool frame) for tests and UI


def camera_params(camera: Camera, width: int, height: int) -> np.ndarray:
    """Camera position, right and up axes (scaled by the half field of view), forward axis, and the
    angular size of one pixel: float64 (13,), the `P_CAM_*` slots followed by `P_PIXEL`'s value."""
    right, up, forward = camera.basis()
    tan_half = math.tan(math.radians(camera.fov_y) / 2.0)
    return np.concatenate([camera.position(), right * tan_half * width / height, up * tan_half, forward,
                           [2.0 * tan_half / height]])


def pack(scene: SceneParams, camera: Camera, width: int, height: int) -> np.ndarray:
    """The kernel's parameter array for one frame (layout `engine.kernels.raymarch.P_*`), float32."""
    return pack64(scene, camera, width, height).astype(np.float32)


def pack64(scene: SceneParams, camera: Camera, width: int, height: int) -> np.ndarray:
    """`pack` before its rounding to float32 (float64 (N_PARAMS,)): the host reference of the device kinematics."""
    prm = np.zeros(raymarch.N_PARAMS, np.float64)
    cam = camera_params(camera, width, height)
    prm[raymarch.P_CAM_POS:raymarch.P_CAM_FWD + 3] = cam[:12]
    prm[raymarch.P_PIXEL] = cam[12]
    prm[raymarch.P_BASE:raymarch.P_BASE + 4] = (*scene.base_xz, math.cos(scene.yaw), math.sin(scene.yaw))
    prm[raymarch.P_SHOULDER:raymarch.P_SHOULDER + 2] = scene.shoulder
    prm[raymarch.P_ELBOW:raymarch.P_ELBOW + 2] = scene.elbow
    prm[raymarch.P_WRIST:raymarch.P_WRIST + 2] = scene.wrist
    prm[raymarch.P_TOOL:raymarch.P_TOOL + 2] = (math.cos(scene.tool_pitch), math.sin(scene.tool_pitch))
    prm[raymarch.P_GRIP] = scene.grip
    prm[raymarch.P_TILE_POS:raymarch.P_TILE_POS + 3] = scene.tile_pos
    prm[raymarch.P_TILE_ROT:raymarch.P_TILE_ROT + 9] = np.asarray(scene.tile_rot).T.reshape(9)  # world -> tile
    prm[raymarch.P_ALBEDO:raymarch.P_ALBEDO + 9] = np.asarray(scene.albedos, np.float64).reshape(9)
    prm[raymarch.P_SUN:raymarch.P_SUN + 3] = scene.sun
    return prm


def check_size(width: int, height: int, budget_bytes: int | None = None) -> None:
    """Raise UserError for sizes that are absurd or would not fit in memory."""
    for name, value in (("width", width), ("height", height)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise UserError(f"{name} must be a whole number of pixels, got {value!r}")
        if value <= 0 or value > MAX_SIDE:
            raise UserError(f"{name} {value} is out of range: choose 1..{MAX_SIDE} pixels")
    need = int(width) * int(height) * BYTES_PER_PIXEL * 3  # device buffers, host copies, encoding
    budget = budget_bytes if budget_bytes is not None else available_memory()
    if budget is not None and need > budget:
        raise UserError(f"{width}x{height} needs {need / 2**30:.1f} GiB for its buffers, "
                        f"more than the {budget / 2**30:.1f} GiB available")


def available_memory() -> int | None:
    """Bytes of memory available to this process (Linux), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class Renderer:
    """Renders the robot-arm scene into image buffers on the current Taichi backend, one kernel launch a frame.

    Args:
        width, height: the image size in pixels, 1..16384 each (`resize` changes it without
            recompiling: the images are ndarrays and the kernel reads its size from them).
        lanes: pixels per thread (None: the backend's packet width, `engine.kernels.lanes.lanes_for`);
            each width is a kernel of its own.

    Attributes:
        last_ms (float): the wall time of the last `render`, launch to sync, in milliseconds (the
            first call also compiles the kernel before the offline cache has it: ~75 s on 2 cpu cores in
            packets of 8, ~10-20 s at one ray per thread).

    Raises:
        UserError: a size out of range or too large for the memory available (`check_size`).

    The frame's scene comes from the timeline (`app.scenes.robot_arm.scene_at(t)`) or any
    `SceneParams`; the camera is an orbit (`Camera`). After `render`, `depth()`, `normals()` and
    `steps()` read the other outputs of the same frame. A whole program: examples/render_frame.py.

    Example:
        >>> from app.scenes.robot_arm import scene_at
        >>> from engine import backend
        >>> _ = backend.init("cpu")
        >>> renderer = Renderer(64, 32)
        >>> rgb = renderer.render(scene_at(0.5), Camera(azimuth=24.0, elevation=20.0, distance=4.7))
        >>> rgb.shape, rgb.dtype, renderer.depth().shape, renderer.steps().dtype
        ((32, 64, 3), dtype('float32'), (32, 64), dtype('int32'))
        >>> bool(0.0 <= rgb.min() and rgb.max() <= 1.0)
        True
    """

    def __init__(self, width: int = 2048, height: int = 1024, lanes: int | None = None):
        if lanes is not None and not (isinstance(lanes, int) and 1 <= lanes <= 64):
            raise UserError(f"lanes must be an integer from 1 to 64 (got {lanes!r})")
        self.width = self.height = 0
        self.last_ms = float("nan")
        self.resize(width, height)  # (requires a running backend)
        # pixels of a row per thread, fixed for this renderer; the image is the same bit for bit at any width
        self.lanes = lanes or lanes_for(backend.arch_in_use())

    def resize(self, width: int, height: int) -> None:
        """Reallocate the image buffers (no kernel recompilation)."""
        import taichi as ti

        check_size(width, height)
        if (width, height) == (self.width, self.height):
            return
        backend.require()
        self.width, self.height = int(width), int(height)
        self._prm = ti.ndarray(ti.f32, raymarch.N_PARAMS)
        self._rgb = ti.ndarray(ti.f32, (self.height, self.width, 3))
        self._depth = ti.ndarray(ti.f32, (self.height, self.width))
        self._normal = ti.ndarray(ti.f32, (self.height, self.width, 3))
        self._steps = ti.ndarray(ti.i32, (self.height, self.width))

    def render(self, scene: SceneParams, camera: Camera) -> np.ndarray:
        """Render one frame of `scene` seen by `camera`.

        Returns:
            np.ndarray: linear RGB, (height, width, 3) float32 in [0, 1], tone-mapped but not
            gamma-encoded (`srgb8()` or `engine.image_io.srgb8` for display).
        """
        import taichi as ti

        started = time.perf_counter()
        self.render_packed(pack(scene, camera, self.width, self.height))
        ti.sync()
        self.last_ms = (time.perf_counter() - started) * 1e3
        return self._rgb.to_numpy()

    def render_packed(self, prm: np.ndarray | None = None) -> None:
        """Launch the render of an already packed parameter array (float32 (N_PARAMS,), layout
        `engine.kernels.raymarch.P_*`) into the buffers, no read-back: `rgb_buffer` holds the image on the
        device. prm None: the parameters already in `prm_buffer`, packed there on the device (the differentiable
        renderer's forward-image comparison: `engine.kernels.kinematics.pack_forward`)."""
        if prm is not None:
            self._prm.from_numpy(np.asarray(prm, np.float32))
        launch(raymarch.render, self._prm, self._rgb, self._depth, self._normal, self._steps, self.lanes)

    @property
    def prm_buffer(self):
        """The packed parameters the next `render_packed()` reads, on the device (ti.ndarray f32 (N_PARAMS,))."""
        return self._prm

    @property
    def rgb_buffer(self):
        """The last frame's linear RGB as the device array itself (ti.ndarray f32 (height, width, 3))."""
        return self._rgb

    def srgb8(self) -> np.ndarray:
        """The last frame as sRGB uint8 (H, W, 3), ready for a PNG or a texture."""
        from engine.image_io import srgb8

        return srgb8(self._rgb.to_numpy())

    def depth(self) -> np.ndarray:
        """Distance along each ray to the surface (H, W); `MAX_DEPTH` where the ray escaped."""
        return self._depth.to_numpy()

    def normals(self) -> np.ndarray:
        """World-space unit normals (H, W, 3); zero where the ray escaped."""
        return self._normal.to_numpy()

    def steps(self) -> np.ndarray:
        """March iterations per pixel (H, W) int32."""
        return self._steps.to_numpy()

    def aovs(self) -> dict[str, np.ndarray]:
        return {"depth": self.depth(), "normal": self.normals(), "steps": self.steps()}

