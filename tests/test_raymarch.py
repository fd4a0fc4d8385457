"""The ray-marched frame: image sanity at a small size, cpu vs vulkan (and cuda) parity, bad sizes."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.claims.raymarch_parity import pixel_parity
from app.claims.thresholds import PIXEL_MAX_ERR, PIXEL_MIN_SHARE
from app.scenes import robot_arm
from engine import image_io
from engine.errors import UserError
from engine.kernels.lanes import CPU_LANES
from engine.kernels.raymarch import N_PARAMS, TILE_HALF
from engine.render import MAX_DEPTH, Camera, Renderer, camera_params, check_size, pack
from tests.conftest import OTHER_ARCHS, backend_worker

W, H = 256, 128


def project(point: np.ndarray, camera: Camera, width: int = W, height: int = H) -> tuple[int, int]:
    """Pixel (row, col) where a world point appears, using the kernel's camera convention."""
    right, up, forward = camera.basis()
    rel = np.asarray(point) - camera.position()
    tan_half = np.tan(np.radians(camera.fov_y) / 2)
    u = rel @ right / (rel @ forward) / (tan_half * width / height)
    v = rel @ up / (rel @ forward) / tan_half
    return int((1 - v) / 2 * height), int((u + 1) / 2 * width)


@pytest.fixture(scope="module")
def frame(ti_cpu):
    out = robot_arm.raymarch_frame(t=0.5, width=W, height=H)
    return out


def test_frame_is_finite_and_not_blank(frame):
    rgb = frame["rgb"]
    assert rgb.shape == (H, W, 3) and rgb.dtype == np.float32
    assert np.isfinite(rgb).all() and 0.0 <= rgb.min() and rgb.max() <= 1.0
    assert rgb.std() > 0.05 and len(np.unique(image_io.srgb8(rgb).reshape(-1, 3), axis=0)) > 500
    assert frame["depth"].shape == (H, W) and frame["normal"].shape == (H, W, 3)
    assert frame["steps"].min() >= 1


def test_sky_floor_and_arm_where_expected(frame):
    camera = Camera()
    depth, normal, rgb = frame["depth"], frame["normal"], frame["rgb"]
    # sky along the top row: escaped rays, bluish-grey
    assert (depth[0] == MAX_DEPTH).all() and (rgb[0, :, 2] >= rgb[0, :, 0]).all()
    # floor in the bottom-left corner: a hit facing straight up
    assert depth[-2, 2] < MAX_DEPTH
    np.testing.assert_allclose(normal[-2, 2], [0, 1, 0], atol=1e-3)
    # the arm's elbow joint: a hit about as far as the elbow is from the camera (the floor behind is > 5 m)
    scene = robot_arm.scene_at(0.5)
    yaw = scene.yaw
    elbow = np.array([robot_arm.BASE_XZ[0] + scene.elbow[0] * np.sin(yaw), scene.elbow[1],
                      robot_arm.BASE_XZ[1] + scene.elbow[0] * np.cos(yaw)])
    row, col = project(elbow, camera)
    distance = np.linalg.norm(elbow - camera.position())
    assert abs(depth[row, col] - distance) < 0.3 and normal[row, col, 1] < 0.99  # joint radius + link width
    # a standing tile (slot 0, the S): its face points at the camera side (+z)
    row, col = project(robot_arm.slot_center(0) + [0.12, 0.15, TILE_HALF[2]], camera)
    assert normal[row, col, 2] > 0.5


def world_points(depth: np.ndarray, camera: Camera) -> np.ndarray:
    """(H, W, 3) world position of each pixel's hit, from the depth AOV and the kernel's camera convention."""
    height, width = depth.shape
    right, up, forward = camera.basis()
    tan_half = np.tan(np.radians(camera.fov_y) / 2)
    u = ((np.arange(width) + 0.5) / width * 2 - 1)[None, :, None] * tan_half * width / height
    v = (1 - (np.arange(height) + 0.5) / height * 2)[:, None, None] * tan_half
    rays = forward + right * u + up * v
    rays /= np.linalg.norm(rays, axis=-1, keepdims=True)
    return camera.position() + rays * depth[..., None]


def floor_specks(rgb: np.ndarray, depth: np.ndarray, normal: np.ndarray, camera: Camera) -> np.ndarray:
    """Floor pixels (off the grid lines) much darker than most of their 8 neighbours: a boolean mask.

    The floor's shading is smooth (its penumbrae are soft) apart from the painted grid lines, so a
    pixel there darker by a third than the median of its neighbourhood is an artifact."""
    points = world_points(depth, camera)
    to_line = np.minimum(*(np.abs(points[..., k] * 2 - np.round(points[..., k] * 2)) * 0.5 for k in (0, 2)))
    floor = (depth < MAX_DEPTH) & (np.abs(points[..., 1]) < 5e-3) & (normal[..., 1] > 0.999) & (to_line > 0.02)
    lum = rgb.mean(axis=-1)

    def neighbours(image: np.ndarray) -> np.ndarray:
        padded = np.pad(image, 1, mode="edge")
        height, width = image.shape
        return np.stack([padded[1 + dy:1 + dy + height, 1 + dx:1 + dx + width]
                         for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)])

    inside = floor & neighbours(floor).all(axis=0)  # contact shading where geometry meets the floor is real
    return inside & (lum < 0.67 * np.median(neighbours(lum), axis=0))


def test_floor_beside_the_table_has_no_shadow_specks(ti_cpu):
    # t=0.8 seen from behind the table: the soft-shadow march once took a bounding volume's distance as
    # the previous sample's, estimated a closest approach of 0 and left hard black specks and a streak
    # on the floor there (about (1.0, 0, -1.3)); the penumbra around them is soft
    camera = Camera(azimuth=150.0, elevation=40.0, distance=4.0, target=(0.8, 0.0, -1.4))
    renderer = Renderer(384, 192)
    rgb = renderer.render(robot_arm.scene_at(0.8), camera)
    specks = floor_specks(rgb, renderer.depth(), renderer.normals(), camera)
    assert (renderer.normals()[..., 1] > 0.999).mean() > 0.5  # the view is mostly floor
    assert not specks.any(), f"{specks.sum()} dark specks on the floor at pixels {np.argwhere(specks)[:5].tolist()}"


def test_the_fallen_letter_lies_on_its_face(ti_cpu):
    # as the README tells it: the tile fell forward onto its face, so at t=0 its blank back faces up
    face_normal = robot_arm.FALLEN_ROT @ [0.0, 0.0, 1.0]
    assert face_normal[1] < -0.99
    camera = Camera()
    rgb = Renderer(W, H).render(robot_arm.scene_at(0.0), camera)
    top = [robot_arm.FALLEN_CENTER
           + robot_arm.FALLEN_ROT @ [sx * TILE_HALF[0] * 0.8, sy * TILE_HALF[1] * 0.8, -TILE_HALF[2]]
           for sx in (-1, 1) for sy in (-1, 1)]
    rows, cols = zip(*(project(corner, camera) for corner in top))
    tile = rgb[min(rows):max(rows) + 1, min(cols):max(cols) + 1]
    assert tile.size and tile.mean() > 0.5  # the pale tile itself is there
    letter_red = tile[..., 0] > 3.0 * tile[..., 1]  # the letter's paint; the tile and the table are not this red
    assert not letter_red.any(), f"{letter_red.sum()} pixels of the letter show on the fallen tile's back"


def test_aov_images_encode(frame):
    assert image_io.depth_image(frame["depth"], MAX_DEPTH).shape == (H, W)
    assert image_io.normal_image(frame["normal"]).shape == (H, W, 3)
    assert image_io.heatmap(frame["steps"], 0, 160).shape == (H, W, 3)


@pytest.mark.parametrize("arch", OTHER_ARCHS)
@pytest.mark.parametrize("t", [0.0, 0.5, 1.0])
def test_cpu_and_other_backends_agree(arch, t):
    from tests.conftest import fresh_worker

    inputs = {"t": t, "width": 128, "height": 64}  # fresh workers: they load the kernel that earlier processes compiled
    a = fresh_worker("cpu").call("raymarch_frame", **inputs)["rgb"]
    b = fresh_worker(arch).call("raymarch_frame", **inputs)["rgb"]
    share, max_err, _ = pixel_parity(a, b)
    assert share >= PIXEL_MIN_SHARE and max_err <= PIXEL_MAX_ERR, (share, max_err)


@pytest.mark.parametrize("width,height", [(0, 64), (-3, 64), (64, 16385), (2.5, 64), (True, 64)])
def test_absurd_sizes_are_user_errors(width, height):
    with pytest.raises(UserError, match="width|height"):
        check_size(width, height)


def test_size_beyond_memory_is_a_user_error():
    with pytest.raises(UserError, match="GiB"):
        check_size(16384, 16384, budget_bytes=2**30)


def test_render_cli_rejects_bad_sizes_in_one_line(tmp_path):
    for flags in (["--width", "0"], ["--height", "-1"], ["--width", "20000"], ["--t", "1.5"]):
        result = subprocess.run([sys.executable, "-m", "app", "render", *flags, "--out", str(tmp_path)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


def test_camera_packing_is_orthonormal():
    prm = pack(robot_arm.scene_at(0.0), Camera(), 200, 100)
    right, up, fwd = prm[3:6], prm[6:9], prm[9:12]
    assert abs(right @ up) < 1e-6 and abs(right @ fwd) < 1e-6 and abs(up @ fwd) < 1e-6
    assert np.linalg.norm(right) / np.linalg.norm(up) == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("arch,lanes", [("cpu", CPU_LANES), ("vulkan", 4)])
def test_packets_render_the_one_ray_image_bit_for_bit(arch, lanes):
    """Packets (engine.kernels.lanes) and one ray per thread give the same frame: 61 columns (full packets and a
    last one only partly filled), with lanes that finish at different steps. On the cpu every output bit for bit.
    Vulkan runs one ray per thread; its packet of 4 checks that the lane code means the same through SPIR-V, where
    Mesa's NIR compiles the packet's normal differently in the last bits (measured: 43 of 7320 normal components
    differ, by at most 1.2e-5; colour at most 6.4e-6), while the march (hits, depths, steps) stays bit for bit."""
    worker = backend_worker(arch)
    inputs = {"t": 0.5, "width": 61, "height": 40}
    one = worker.call("raymarch_frame", **inputs, lanes=1)
    packets = worker.call("raymarch_frame", **inputs, lanes=lanes)
    for key in ("depth", "steps"):
        assert np.array_equal(one[key], packets[key]), key
    tolerance = 0.0 if arch == "cpu" else 3e-5
    for key in ("rgb", "normal"):
        assert np.abs(one[key] - packets[key]).max() <= tolerance, key
    full = 61 // lanes * lanes
    steps = one["steps"][:, :full].reshape(40, -1, lanes)
    assert (steps.max(-1) > steps.min(-1)).mean() > 0.3  # the premise: most packets' lanes stop at different steps


def test_the_differentiable_renderers_march_is_the_same_in_packets(ti_cpu):
    """`raymarch_grad.march_pixels` (hits, their distances, the edge layers and brackets) in the cpu's packets
    equals one ray per thread, bit for bit, on a width that leaves a last packet partly filled."""
    import taichi as ti

    from engine.kernels import raymarch_grad

    width, height = 61, 40
    n_px = width * height
    scene = ti.field(ti.f32, N_PARAMS)
    scene.from_numpy(pack(robot_arm.scene_at(0.5), Camera(), width, height))
    cam = ti.field(ti.f32, raymarch_grad.N_CAM)
    cam.from_numpy(camera_params(Camera(), width, height).astype(np.float32))
    outs = []
    for lanes in (1, CPU_LANES):
        active = ti.field(ti.i32, raymarch_grad.N_LAYERS * n_px)
        march_t = ti.field(ti.f32, n_px)
        edges = ti.Vector.field(2, ti.f32, (n_px, raymarch_grad.N_LAYERS - 1))
        raymarch_grad.march_pixels(scene, cam, width, height, 0, height, 1.0, active, march_t, edges, lanes)
        outs.append((active.to_numpy(), march_t.to_numpy(), edges.to_numpy()))
    for one, packet in zip(*outs):
        assert np.array_equal(one, packet)
    active = outs[0][0]
    assert active[:n_px].sum() > n_px // 2 and active[n_px:].sum() > 0  # hits and edge layers both present


ADJOINT_SCRIPT = """
import taichi as ti
ti.init(arch=ti.cpu, offline_cache=False)  # compiled here: a cached kernel would print nothing
from engine.kernels.kinematics import scene_from_theta, theta_vector
from engine.kernels.raymarch import light, scene_sdf
from engine.scene_layout import N_THETA
theta = ti.field(ti.f32, N_THETA, needs_grad=True)
point = ti.Vector.field(3, ti.f32, 1, needs_grad=True)
out = ti.field(ti.f32, 1, needs_grad=True)
@ti.kernel
def adjoint_of_both():
    for i in range(1):
        s = scene_from_theta(theta_vector(theta))
        p = point[i]
        n = (p / p.norm()).normalized()
        out[i] = scene_sdf(p, s, True).x + light(p, -n, 1.0, n, 0, 1.0, 1.0, s).sum()
adjoint_of_both.grad()
"""


def test_the_sdf_and_light_adjoints_compile_without_loading_unstored_variables(tmp_path):
    """Taichi's reverse mode warned "Loading variable N before anything is stored to it" in `sd_arm` (the tool
    direction used whole, then by component in a branch) and in `light` (the normal's y component): 5 warnings,
    on every cold compile of the differentiable renderer. The gradients were right (render_gradcheck), but such a
    warning can also mean an adjoint reads an unset value, so none may be printed."""
    script = tmp_path / "adjoints.py"  # a file: Taichi reads a kernel's source
    script.write_text(ADJOINT_SCRIPT)
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stderr
    assert "Loading variable" not in result.stderr, result.stderr
