"""The ray-marched robot-arm scene: signed distances, materials, shading, one kernel.

Everything the scene needs per frame (camera basis, the arm's joint positions from
forward kinematics, the moving tile's pose) arrives in one small float32 ndarray
(`params`, layout `P_*` below); geometry that never moves is written here as
constants. So a new frame or a new resolution never recompiles the kernel: image
buffers are ndarrays and only their shapes change.

Written for cross-backend parity (LLVM on cpu/cuda vs SPIR-V through Mesa's NIR on
vulkan), from measurements on this scene:
- Only correctly rounded IEEE operations are used on the device: + - * /, sqrt,
  min/max/abs/floor/select. No sin/cos/exp/pow/atan2/log: each backend ships its own
  approximations of those and they differ in the last bits (exp and pow by up to
  ~6e-6 relative), which then flips march and shadow decisions. Rotations arrive as
  precomputed cos/sin or matrices; specular powers are repeated squaring; fog and
  tone mapping are rational functions.
- NIR rewrites `a*b + a*c` into `a*(b + c)` and folds chains of constants
  (`(x + c1) + c2 -> x + (c1 + c2)`), which LLVM without fast-math does not. The
  code below keeps constants pre-combined and avoids shared factors in sums where it
  matters; what remains is measured by the `raymarch_parity` claim.
- Silhouettes are the one place where a last-bit difference could change a pixel
  completely (hit vs miss). The march records its closest approach in units of the
  pixel's footprint and blends the hit colour over the background with a smooth
  coverage of that ratio, so a tiny difference in distance gives a tiny difference in
  colour (and the edges come out anti-aliased).

Packets (engine.kernels.lanes): the geometry, the march, the normal, the shadow and the ambient occlusion are
lane functions: a point is three lane values, one ray's (gpu backends: a thread per ray) or a packet's (cpu: W
rays in one thread's SIMD registers, each ray's arithmetic the same operations as alone). Per-ray branches are
selects; a branch that skips work (a bound far away, a letter no lane shows) is taken when any lane needs it.
The per-ray colour (`material`, `light`, fog, tone curve) is cheap next to the ~47 SDF evaluations a pixel
takes, and is written for one ray.
"""
import taichi as ti

from engine.compile_effort import quick
from engine.kernels.lanes import all_lanes, any_lane, lane, like, packet_indices
from engine.scene_layout import (GLYPH, MOVING_SLOT, N_PACKED, N_SLOTS, PACKED_AT, ROW_Z, SLOT_GLYPHS,  # noqa: F401
                                 SLOT_SPACING, SLOT_X0, TABLE_TOP, TCP_OFFSET, TILE_HALF, TILE_ROUND, TILE_Y,
                                 WORD)  # (the scene's layout)

vec2 = ti.math.vec2
vec3 = ti.math.vec3

# ---- parameter layout (float32 slots): engine.scene_layout.PACKED's offsets; engine/render.py packs them ----
P_CAM_POS = PACKED_AT["cam_pos"]  # camera position (3)
P_CAM_RIGHT = PACKED_AT["cam_right"]  # right axis scaled by tan(fov/2) * aspect (3)
P_CAM_UP = PACKED_AT["cam_up"]  # up axis scaled by tan(fov/2) (3)
P_CAM_FWD = PACKED_AT["cam_fwd"]  # forward axis (3)
P_BASE = PACKED_AT["base"]  # arm base x, z, cos(yaw), sin(yaw)
P_SHOULDER = PACKED_AT["shoulder"]  # joint positions in the arm's plane: (forward distance, height) each
P_ELBOW = PACKED_AT["elbow"]
P_WRIST = PACKED_AT["wrist"]
P_TOOL = PACKED_AT["tool"]  # cos, sin of the tool's pitch in the arm's plane
P_GRIP = PACKED_AT["grip"]  # lateral offset of each finger from the tool axis
P_TILE_POS = PACKED_AT["tile_pos"]  # moving tile centre (3)
P_TILE_ROT = PACKED_AT["tile_rot"]  # moving tile rotation, world -> tile rows (9)
P_PIXEL = PACKED_AT["pixel"]  # angular size of one pixel (for coverage)
P_ALBEDO = PACKED_AT["albedo"]  # albedos (RGB) of the arm's paint, the tiles and the letters: 3 x 3
P_SUN = PACKED_AT["sun"]  # unit direction towards the key light (3)
N_PARAMS = N_PACKED

# ---- scene constants: the layout is engine.scene_layout's (imported above) ----

# albedos that scene parameters may change (the others are constants of `material`)
ALBEDO_PAINT = (0.9, 0.28, 0.025)
ALBEDO_TILE = (0.86, 0.82, 0.72)
ALBEDO_LETTER = (0.72, 0.06, 0.05)

MAX_STEPS = 160
SHADOW_STEPS = 48
T_MAX = 30.0
HIT_EPS = 2e-4  # hit when distance < HIT_EPS * t
# Steps taken after the hit test passes. The test can pass one step earlier on one backend
# than on the other (a last-bit difference in distance); these steps converge both onto the
# surface, so the shaded point no longer depends on which step stopped the march.
REFINE_STEPS = 3
SCENE_TOP = 2.5  # no geometry above this height (the arm's highest joint stays below 2.2)

# materials; M_BOUND marks a distance to a bounding volume, not to a surface
M_SKY, M_FLOOR, M_TABLE, M_TILE, M_LETTER, M_PAINT, M_JOINT, M_STEEL, M_PEDESTAL, M_BOUND = range(10)
# Parts farther than this from their bounding volume return the bound (a safe step that
# skips their detailed SDF). It exceeds the ambient-occlusion reach, and soft shadows skip
# bounds (a bound's distance would cast a blurred shadow of the bounding volume itself).
BOUND_MARGIN = 0.2
# Each near/far decision compares a raw quantity with a constant folded here in Python:
# NIR rewrites `x - c1 < c2` into `x < c2 + c1` (rounded differently), so a test on a bound's
# value can flip between backends and change a ray's step sequence.
NEAR_TABLE = (1.95 + BOUND_MARGIN, TABLE_TOP + BOUND_MARGIN, 0.6 + BOUND_MARGIN)  # |x|, y, |z|
NEAR_MOVING = 0.32 + BOUND_MARGIN  # from the moving tile's centre
NEAR_BASE = (0.42 + BOUND_MARGIN, 1.04 + BOUND_MARGIN)  # radius, height
NEAR_LINKS = (0.2 + BOUND_MARGIN, 0.32 + BOUND_MARGIN)  # from the link polyline, from the arm plane

# S glyph: two 240-degree arcs (iq's sdArc: symmetric about +y, gap around -y),
# rotated so the upper bowl opens to the lower right and the lower bowl to the upper left.
_S_R = 0.08
_S_SC = (0.8660254037844386, -0.5)  # sin, cos of the half aperture (120 degrees)
_S_TOP_ROT = (0.5, -0.8660254037844386)  # cos, sin of -60 degrees
_S_BOT_ROT = (-0.5, 0.8660254037844386)  # cos, sin of +120 degrees
STROKE = 0.03
LETTER_HALF_DEPTH = (TILE_HALF[2] + 0.007) / 2  # the letter spans z in [0, TILE_HALF[2] + 0.007], then rounds


@ti.dataclass
class Scene:
    base: ti.math.vec4  # x, z, cos(yaw), sin(yaw)
    shoulder: vec2
    elbow: vec2
    wrist: vec2
    tool: vec2  # cos, sin of tool pitch
    grip: ti.f32
    tile_pos: vec3
    tile_rot: ti.math.mat3  # world -> tile
    paint: vec3  # albedos
    tile: vec3
    letter: vec3
    sun: vec3  # unit direction towards the key light


@ti.func
def load_scene(prm: ti.template()) -> Scene:
    s = Scene()
    s.base = ti.math.vec4(prm[P_BASE], prm[P_BASE + 1], prm[P_BASE + 2], prm[P_BASE + 3])
    s.shoulder = vec2(prm[P_SHOULDER], prm[P_SHOULDER + 1])
    s.elbow = vec2(prm[P_ELBOW], prm[P_ELBOW + 1])
    s.wrist = vec2(prm[P_WRIST], prm[P_WRIST + 1])
    s.tool = vec2(prm[P_TOOL], prm[P_TOOL + 1])
    s.grip = prm[P_GRIP]
    s.tile_pos = vec3(prm[P_TILE_POS], prm[P_TILE_POS + 1], prm[P_TILE_POS + 2])
    for r in ti.static(range(3)):
        for c in ti.static(range(3)):
            s.tile_rot[r, c] = prm[P_TILE_ROT + 3 * r + c]
    s.paint = vec3(prm[P_ALBEDO], prm[P_ALBEDO + 1], prm[P_ALBEDO + 2])
    s.tile = vec3(prm[P_ALBEDO + 3], prm[P_ALBEDO + 4], prm[P_ALBEDO + 5])
    s.letter = vec3(prm[P_ALBEDO + 6], prm[P_ALBEDO + 7], prm[P_ALBEDO + 8])
    s.sun = vec3(prm[P_SUN], prm[P_SUN + 1], prm[P_SUN + 2])
    return s


# ---------------------------------------------------------------- primitives
# Every function from here to `scene_sdf` is a lane function (engine.kernels.lanes): a point is three lane values
# (px, py, pz), one ray's or a packet's; branches that skip work test `any_lane`, choices per ray use ti.select.
@ti.func
def length2(x, y):
    """|(x, y)|, with a derivative of 0 instead of 0 * inf = NaN at 0 (a point on a segment's axis or inside a
    box: Taichi's adjoint of sqrt at 0). Equal to the plain norm bit for bit for |.|^2 >= 1e-30."""
    return ti.sqrt(ti.max(x * x + y * y, 1e-30))


@ti.func
def length3(x, y, z):
    """|(x, y, z)|, as `length2`."""
    return ti.sqrt(ti.max(x * x + y * y + z * z, 1e-30))


@ti.func
def length(v):
    """`length3` of a vec3 (one ray's vector math)."""
    return length3(v.x, v.y, v.z)


@ti.func
def sd_box(px, py, pz, hx, hy, hz):
    qx = ti.abs(px) - hx
    qy = ti.abs(py) - hy
    qz = ti.abs(pz) - hz
    return length3(ti.max(qx, 0.0), ti.max(qy, 0.0), ti.max(qz, 0.0)) + ti.min(ti.max(qx, ti.max(qy, qz)), 0.0)


@ti.func
def sd_segment2(px, py, ax, ay, bx, by):
    pax = px - ax
    pay = py - ay
    bax = bx - ax
    bay = by - ay
    h = ti.math.clamp((pax * bax + pay * bay) / (bax * bax + bay * bay), 0.0, 1.0)
    return length2(pax - bax * h, pay - bay * h)


@ti.func
def extrude(d2, z, half):
    """Exact distance to a 2D shape (distance d2) extruded over |z| <= half."""
    wy = ti.abs(z) - half
    return ti.min(ti.max(d2, wy), 0.0) + length2(ti.max(d2, 0.0), ti.max(wy, 0.0))


@ti.func
def sd_arc(px, py, ra):
    """Centre line of a 240-degree arc of radius ra (gap around -y)."""
    qx = ti.abs(px)
    d = ti.abs(length2(qx, py) - ra)
    return ti.select(_S_SC[1] * qx > _S_SC[0] * py, length2(qx - _S_SC[0] * ra, py - _S_SC[1] * ra), d)


@ti.func
def rot2(px, py, cs: ti.template()):
    return cs[0] * px - cs[1] * py, cs[1] * px + cs[0] * py


@ti.func
def glyph(g, px, py):
    """Distance to the centre lines of letter g's strokes (tile-local xy); each letter evaluated only where a lane
    shows it."""
    d = like(px, 0.0)
    qx = ti.abs(px)
    if any_lane(g == 0):  # S
        tx, ty = rot2(px, py - _S_R, _S_TOP_ROT)
        bx, by = rot2(px, py + _S_R, _S_BOT_ROT)
        d = ti.select(g == 0, ti.min(sd_arc(tx, ty, _S_R), sd_arc(bx, by, _S_R)), d)
    if any_lane(g == 1):  # H
        d = ti.select(g == 1, ti.min(sd_segment2(qx, py, 0.1, -0.155, 0.1, 0.155),
                                     sd_segment2(px, py, -0.1, 0.0, 0.1, 0.0)), d)
    if any_lane(g == 2):  # A
        d = ti.select(g == 2, ti.min(sd_segment2(qx, py, 0.0, 0.155, 0.115, -0.155),
                                     sd_segment2(px, py, -0.062, -0.04, 0.062, -0.04)), d)
    if any_lane(g == 3):  # N
        d = ti.select(g == 3, ti.min(sd_segment2(qx, py, 0.1, -0.155, 0.1, 0.155),
                                     sd_segment2(px, py, -0.1, 0.155, 0.1, -0.155)), d)
    if any_lane(g == 4):  # O: outline of a stadium
        d = ti.select(g == 4, ti.abs(sd_segment2(px, py, 0.0, -0.065, 0.0, 0.065) - 0.095), d)
    return d


@ti.func
def closer(ad, am, bd, bm):
    """The nearer of (distance, material) a and b (a on ties)."""
    b_nearer = bd < ad
    return ti.select(b_nearer, bd, ad), ti.select(b_nearer, bm, am)


@ti.func
def sd_tile(ux, uy, uz, g):
    """A letter tile in its local frame: (distance, material). The letter stands proud of the front
    face (+z) only: the back is blank, so the fallen tile, lying on its face, shows its back."""
    slab = sd_box(ux, uy, uz, TILE_HALF[0] - TILE_ROUND, TILE_HALF[1] - TILE_ROUND, TILE_HALF[2] - TILE_ROUND) \
        - TILE_ROUND
    letter = extrude(glyph(g, ux, uy) - (STROKE - 0.008), uz - LETTER_HALF_DEPTH, LETTER_HALF_DEPTH) - 0.008
    return closer(slab, like(slab, float(M_TILE)), letter, like(slab, float(M_LETTER)))


@ti.func
def lerp(a, b, w):
    """a*(1-w) + b*w, written so: NIR turns `a + (b-a)*w` into its flrp instruction and lowers
    that back to this form, so only this form evaluates the same on LLVM and on lavapipe."""
    return a * (1.0 - w) + b * w


# ---------------------------------------------------------------- scene parts
@ti.func
def sd_table(px, py, pz):
    # a cheap lower bound: the largest separation along one axis from the table's box
    d = ti.max(py - TABLE_TOP, ti.max(ti.abs(px) - 1.95, ti.abs(pz) - 0.6))
    m = like(d, float(M_BOUND))
    near = (py < NEAR_TABLE[1]) & (ti.abs(px) < NEAR_TABLE[0]) & (ti.abs(pz) < NEAR_TABLE[2])
    if any_lane(near):
        top = sd_box(px, py - (TABLE_TOP - 0.025), pz, 1.94, 0.015, 0.59) - 0.01
        leg = sd_box(ti.abs(px) - 1.8, py - 0.375, ti.abs(pz) - 0.48, 0.035, 0.375, 0.035) - 0.008
        d = ti.select(near, ti.min(top, leg), d)
        m = ti.select(near, float(M_TABLE), m)
    return d, m


@ti.func
def slot_glyph(i):
    g = like(i, 0)
    for s in ti.static(range(N_SLOTS)):
        g = ti.select(i == s, SLOT_GLYPHS[s], g)
    return g


@ti.func
def _tile_candidate(d, m, px, py, pz, s: Scene, rx, ry, rz, i0, k, near_row, near_moving):
    """Candidate k of `sd_tiles`, folded into (d, m): standing tile i0 + k (k < 2) or the moving tile (k == 2)."""
    i = i0 + k
    ux = px - (SLOT_X0 + SLOT_SPACING * ti.cast(i, ti.f32))
    uy = py - TILE_Y
    uz = pz - ROW_Z
    g = slot_glyph(i)
    usable = near_row & (i >= 0) & (i < N_SLOTS) & (i != MOVING_SLOT) & (k < 2)
    if k == 2:  # (k is the same in every lane)
        r = s.tile_rot
        ux = r[0, 0] * rx + r[0, 1] * ry + r[0, 2] * rz
        uy = r[1, 0] * rx + r[1, 1] * ry + r[1, 2] * rz
        uz = r[2, 0] * rx + r[2, 1] * ry + r[2, 2] * rz
        g = like(i, SLOT_GLYPHS[MOVING_SLOT])
        usable = near_moving
    out_d, out_m = d, m
    if any_lane(usable):
        td, tm = sd_tile(ux, uy, uz, g)
        cd, cm = closer(d, m, td, tm)
        out_d = ti.select(usable, cd, d)
        out_m = ti.select(usable, cm, m)
    return out_d, out_m


@ti.func
def sd_tiles(px, py, pz, s: Scene, unrolled: ti.template()):
    """The standing tiles and the moving one, with one inlined tile SDF for all of them.

    Tiles repeat along x, so only the two slots around p.x can hold the nearest standing
    tile; the third candidate is the moving tile. Far from all of them, the distance to
    their bounding volumes stands in (it is never larger than the true distance).
    `unrolled` (differentiated kernels): three inlined copies instead of a dynamic loop,
    whose loop-carried minimum Taichi's reverse mode gets silently wrong (measured).
    """
    row_bound = sd_box(px, py - TILE_Y, pz - ROW_Z, 1.72, 0.25, 0.06)
    rx = px - s.tile_pos.x
    ry = py - s.tile_pos.y
    rz = pz - s.tile_pos.z
    moving_dist = length3(rx, ry, rz)
    moving_bound = moving_dist - 0.32
    near_row = row_bound < BOUND_MARGIN
    near_moving = moving_dist < NEAR_MOVING
    near = near_row | near_moving
    d = ti.min(row_bound, moving_bound)
    m = like(d, float(M_BOUND))
    if any_lane(near):
        # each group is either evaluated exactly or stands in with its bound
        ed = ti.select(near_row, 1e9, row_bound)
        em = like(d, float(M_BOUND))
        bd, bm = closer(ed, em, moving_bound, em)
        ed = ti.select(near_moving, ed, bd)
        em = ti.select(near_moving, em, bm)
        i0 = ti.cast(ti.floor((px - SLOT_X0) / SLOT_SPACING), ti.i32)
        if ti.static(unrolled):
            for k in ti.static(range(3)):
                ed, em = _tile_candidate(ed, em, px, py, pz, s, rx, ry, rz, i0, k, near_row, near_moving)
        else:
            for k in range(3):  # a dynamic loop: one inlined copy of the tile SDF, not three
                ed, em = _tile_candidate(ed, em, px, py, pz, s, rx, ry, rz, i0, k, near_row, near_moving)
        d = ti.select(near, ed, d)
        m = ti.select(near, em, m)
    return d, m


@ti.func
def sd_arm(px, py, pz, s: Scene):
    """Pedestal, turret, shoulder bracket and the planar arm, in the arm plane's coordinates.

    Two groups, each behind its own bound: the base (a cylinder of radius 0.42 up to 1.04 m
    around the base axis) and the moving links (0.2 m around the polyline shoulder, elbow,
    wrist, tool centre, within 0.32 m of the arm plane)."""
    dx = px - s.base.x
    dz = pz - s.base.y
    radial = length2(dx, dz)
    fwd = dx * s.base.w + dz * s.base.z  # forward = (sin yaw, cos yaw) in xz
    lat = dx * s.base.z - dz * s.base.w
    d = extrude(radial - 0.42, py - 0.52, 0.52)
    m = like(d, float(M_BOUND))
    near_base = (radial < NEAR_BASE[0]) & (py < NEAR_BASE[1])
    if any_lane(near_base):
        pedestal = extrude(radial - 0.25, py - 0.3, 0.3) - 0.02
        plate = extrude(radial - 0.4, py - 0.02, 0.02)
        turret = extrude(radial - 0.2, py - 0.72, 0.1) - 0.02
        bracket = sd_box(fwd, py - 0.9, lat, 0.12, 0.08, 0.15) - 0.03
        bd, bm = closer(ti.min(pedestal, plate), like(d, float(M_PEDESTAL)), ti.min(turret, bracket),
                        like(d, float(M_PAINT)))
        d = ti.select(near_base, bd, d)
        m = ti.select(near_base, bm, m)
    qx, qy = fwd, py
    # a copy read by component: `s.tool` used whole here and by component in the branch below made Taichi's
    # reverse mode (1.7.4) warn "Loading variable N before anything is stored to it" (a false alarm: the
    # gradient matched central differences; tests/test_raymarch.py keeps the compile free of it)
    tool = vec2(s.tool.x, s.tool.y)
    tcp = s.wrist + tool * TCP_OFFSET
    to_links = ti.min(sd_segment2(qx, qy, s.shoulder.x, s.shoulder.y, s.elbow.x, s.elbow.y),
                      ti.min(sd_segment2(qx, qy, s.elbow.x, s.elbow.y, s.wrist.x, s.wrist.y),
                             sd_segment2(qx, qy, s.wrist.x, s.wrist.y, tcp.x, tcp.y)))
    bound = ti.max(to_links - 0.2, ti.abs(lat) - 0.32)
    near_links = (to_links < NEAR_LINKS[0]) & (ti.abs(lat) < NEAR_LINKS[1])
    out_d, out_m = closer(d, m, bound, like(d, float(M_BOUND)))
    if any_lane(near_links):
        upper = extrude(sd_segment2(qx, qy, s.shoulder.x, s.shoulder.y, s.elbow.x, s.elbow.y) - 0.055, lat,
                        0.06) - 0.03
        fore = extrude(sd_segment2(qx, qy, s.elbow.x, s.elbow.y, s.wrist.x, s.wrist.y) - 0.04, lat, 0.045) - 0.025
        ld, lm = closer(d, m, ti.min(upper, fore), like(d, float(M_PAINT)))
        joints = ti.min(extrude(length2(qx - s.shoulder.x, qy - s.shoulder.y) - 0.115, lat, 0.185) - 0.012,
                        ti.min(extrude(length2(qx - s.elbow.x, qy - s.elbow.y) - 0.09, lat, 0.105) - 0.01,
                               extrude(length2(qx - s.wrist.x, qy - s.wrist.y) - 0.06, lat, 0.075) - 0.01))
        ld, lm = closer(ld, lm, joints, like(d, float(M_JOINT)))
        vx = qx - s.wrist.x
        vy = qy - s.wrist.y
        along = vx * tool.x + vy * tool.y
        across = vy * tool.x - vx * tool.y
        palm = sd_box(along - 0.1, across, lat, 0.035, 0.05, 0.27) - 0.012
        finger = sd_box(along - 0.215, across, ti.abs(lat) - s.grip, 0.072, 0.042, 0.009) - 0.004
        ld, lm = closer(ld, lm, ti.min(palm, finger), like(d, float(M_STEEL)))
        out_d = ti.select(near_links, ld, out_d)
        out_m = ti.select(near_links, lm, out_m)
    return out_d, out_m


@ti.func
def scene_distance(px, py, pz, s: Scene, unrolled: ti.template()):
    """(distance, material) of the whole scene at the lane point (px, py, pz); `unrolled` for differentiated
    kernels (see sd_tiles)."""
    d, m = py, like(py, float(M_FLOOR))
    td, tm = sd_table(px, py, pz)
    d, m = closer(d, m, td, tm)
    td, tm = sd_tiles(px, py, pz, s, unrolled)
    d, m = closer(d, m, td, tm)
    td, tm = sd_arm(px, py, pz, s)
    return closer(d, m, td, tm)


@ti.func
def scene_sdf(p: vec3, s: Scene, unrolled: ti.template()) -> vec2:
    """`scene_distance` of one ray's point p, as vec2(distance, material)."""
    d, m = scene_distance(p.x, p.y, p.z, s, unrolled)
    return vec2(d, m)


# ---------------------------------------------------------------- shading
_KEY = (-0.4813, 0.7700, 0.4187)
KEY_DIR = tuple(v / (_KEY[0] ** 2 + _KEY[1] ** 2 + _KEY[2] ** 2) ** 0.5 for v in _KEY)  # default, towards the key light
KEY_COL = (2.9, 2.65, 2.3)
SKY_ZENITH = (0.22, 0.36, 0.62)
SKY_HORIZON = (0.5, 0.55, 0.62)
FLOOR_BASE = (0.3, 0.3, 0.31)
FLOOR_LINE = (0.2, 0.21, 0.23)


@ti.func
def tap_sign(k) -> vec3:
    """Tetrahedral tap k of `surface_at`: (+,-,-), (-,-,+), (-,+,-), (+,+,+), each sign from the bits of k."""
    sx = 1.0 if (k == 0 or k == 3) else -1.0
    sy = 1.0 if k >= 2 else -1.0
    sz = 1.0 if (k == 1 or k == 3) else -1.0
    return vec3(sx, sy, sz)


NORMAL_EPS = 0.0005


@ti.func
def tap_sample(px, py, pz, k, s: Scene):
    """(distance, material) at `surface_at`'s sample k around the lane point p: tetrahedral tap k (k < 4, at
    p + tap_sign(k) * NORMAL_EPS) or p itself (k = 4)."""
    e = ti.select(k < 4, tap_sign(k) * NORMAL_EPS, 0.0)
    return scene_distance(px + e.x, py + e.y, pz + e.z, s, False)


@ti.func
def with_tap(t0, t1, t2, t3, k, d):
    """The four taps (lane values) with tap k (a runtime index) set to d, by a select per tap: `taps[k] = d` on a
    vec4 in the taps' loop left the cpu's image bit for bit as it was but moved vulkan's (lavapipe): 172 pixels
    of the 2048x1024 parity frame off by more than 1e-4 instead of 14 (measured, docs/RESULTS.md)."""
    return ti.select(k == 0, d, t0), ti.select(k == 1, d, t1), ti.select(k == 2, d, t2), ti.select(k == 3, d, t3)


@ti.func
def normal_from_taps(t0, t1, t2, t3):
    """The unit normal (lane components) from the distances at `surface_at`'s four taps (tetrahedral
    differences); `length3`, so a differentiated caller gets no NaN where the taps cancel."""
    nx, ny, nz = like(t0, 0.0), like(t0, 0.0), like(t0, 0.0)
    for k in ti.static(range(4)):
        e = tap_sign(k)
        d = (t0, t1, t2, t3)[k]
        nx += e.x * d
        ny += e.y * d
        nz += e.z * d
    norm = length3(nx, ny, nz)
    return nx / norm, ny / norm, nz / norm


@ti.func
def tap_normal(taps: ti.math.vec4) -> vec3:
    """`normal_from_taps` of one ray's taps (`raymarch_grad.shade_slots` differentiates it)."""
    nx, ny, nz = normal_from_taps(taps[0], taps[1], taps[2], taps[3])
    return vec3(nx, ny, nz)


@ti.func
def surface_at(px, py, pz, s: Scene):
    """The four tetrahedral taps around the lane point p (for `normal_from_taps`), then the distance and material
    at p itself: five scene evaluations in one loop, so one inlined SDF copy (untaped only)."""
    t0, t1, t2, t3, d0, m0 = like(px, 0.0), like(px, 0.0), like(px, 0.0), like(px, 0.0), like(px, 0.0), like(px, 0.0)
    for k in range(5):
        d, m = tap_sample(px, py, pz, k, s)
        t0, t1, t2, t3 = with_tap(t0, t1, t2, t3, k, d)
        d0, m0 = ti.select(k == 4, d, d0), ti.select(k == 4, m, m0)
    return t0, t1, t2, t3, d0, m0


@ti.func
def soft_shadow(ox, oy, oz, s: Scene, active):
    """Penumbra towards the key light from the lane point o, in the lanes where `active` (0 elsewhere): the
    closest approach to occluders (iq's improved soft shadow: estimates the true closest distance between two
    steps, which removes banding)."""
    res = like(ox, 1.0)
    t = like(ox, 0.015)
    prev_h = like(ox, 1e10)
    done = ti.select(active, 0, 1)
    for _ in range(SHADOW_STEPS):
        h, hm = scene_distance(ox + s.sun.x * t, oy + s.sun.y * t, oz + s.sun.z * t, s, False)
        live = done == 0
        surface = hm != M_BOUND
        y = h * h / (2.0 * prev_h)
        closest = ti.sqrt(ti.max(h * h - y * y, 0.0))
        res = ti.select(live & surface, ti.min(res, 10.0 * closest / ti.max(t - y, 1e-4)), res)
        # A bound's distance is no distance to the surfaces the next sample measures: kept as
        # prev_h it made y exceed h there (closest approach 0: a hard black speck on the floor).
        prev_h = ti.select(live, ti.select(surface, h, 1e10), prev_h)
        t = ti.select(live, t + ti.math.clamp(h, 0.01, 0.5), t)
        stop = (res < 0.001) | (t > 8.0) | (oy + s.sun.y * t > SCENE_TOP)  # nothing stands above SCENE_TOP
        done = ti.select(live & stop, 1, done)
        if all_lanes(done != 0):
            break
    res = ti.math.clamp(res, 0.0, 1.0)
    return ti.select(active, res * res * (3.0 - 2.0 * res), 0.0)


@ti.func
def ambient_occlusion(px, py, pz, nx, ny, nz, s: Scene):
    occ = like(px, 0.0)
    weight = 1.0
    for i in range(5):
        h = 0.012 + 0.04 * ti.cast(i, ti.f32)
        d, _ = scene_distance(px + nx * h, py + ny * h, pz + nz * h, s, False)
        occ += ti.max(h - d, 0.0) * weight
        weight *= 0.8
    return ti.math.clamp(1.0 - 2.5 * occ, 0.0, 1.0)


# From here to `tone_map`, one ray's colour: cheap next to the SDF evaluations above, so written once for one ray.
@ti.func
def sky(rd: vec3) -> vec3:
    k = ti.math.clamp(rd.y * 1.6, 0.0, 1.0)
    k = k * (2.0 - k)
    return lerp(vec3(SKY_HORIZON), vec3(SKY_ZENITH), k)


@ti.func
def grid_line(x: ti.f32, width: ti.f32) -> ti.f32:
    """1 on a grid line (every 0.5 m), fading to 0 over `width` metres."""
    f = x * 2.0 - ti.floor(x * 2.0)
    dist = ti.min(f, 1.0 - f) * 0.5
    return 1.0 - ti.math.smoothstep(0.0, width, dist)


@ti.func
def material(m: ti.i32, p: vec3, t: ti.f32, s: Scene):
    """Albedo, specular strength and shininess exponent (as a number of squarings)."""
    albedo = vec3(0.5)
    spec = 0.04
    squarings = 4
    if m == M_FLOOR:
        w = 0.004 + 0.0012 * t
        line = ti.max(grid_line(p.x, w), grid_line(p.z, w)) * 0.8
        albedo = lerp(vec3(FLOOR_BASE), vec3(FLOOR_LINE), line)
        spec = 0.02
    elif m == M_TABLE:
        albedo = vec3(0.2, 0.11, 0.055)
        spec = 0.06
        squarings = 5
    elif m == M_TILE:
        albedo = s.tile
        spec = 0.05
    elif m == M_LETTER:
        albedo = s.letter
        spec = 0.18
        squarings = 6
    elif m == M_PAINT:
        albedo = s.paint
        spec = 0.25
        squarings = 6
    elif m == M_JOINT:
        albedo = vec3(0.07, 0.07, 0.08)
        spec = 0.35
        squarings = 6
    elif m == M_STEEL:
        albedo = vec3(0.55, 0.57, 0.6)
        spec = 0.6
        squarings = 7
    elif m == M_PEDESTAL:
        albedo = vec3(0.13, 0.13, 0.14)
        spec = 0.15
        squarings = 5
    return albedo, spec, squarings


MAX_SQUARINGS = 7  # the highest shininess of `material`, as a number of squarings


@ti.func
def light(p: vec3, rd: vec3, t: ti.f32, n: vec3, m: ti.i32, shadow: ti.f32, ao: ti.f32, s: Scene) -> vec3:
    """Colour at surface point p (normal n, material m) seen along rd, given its key-light
    visibility `shadow` and ambient occlusion `ao`: the shading every renderer shares."""
    albedo, spec, squarings = material(m, p, t, s)
    n_up = n.dot(vec3(0.0, 1.0, 0.0))  # = n.y exactly; the component load gave sd_arm's reverse-mode warning
    key = s.sun
    ndl = ti.max(n.dot(key), 0.0)
    half = key - rd
    half = half / length(half)
    ndh = ti.max(n.dot(half), 0.0)
    highlight = ndh
    for i in ti.static(range(MAX_SQUARINGS)):  # ndh ** (2 ** squarings) by exact multiplications
        if i < squarings:
            highlight = highlight * highlight
    ndv = ti.math.clamp(-n.dot(rd), 0.0, 1.0)
    f1 = 1.0 - ndv
    f2 = f1 * f1
    fresnel = lerp(spec, 1.0, f2 * f2 * f1)
    sky_amount = 0.5 + 0.5 * n_up
    bounce = ti.math.clamp(0.5 - 0.5 * n_up, 0.0, 1.0)
    diffuse = vec3(KEY_COL) * (ndl * shadow) + vec3(SKY_ZENITH) * (1.3 * sky_amount * ao) \
        + vec3(0.35, 0.3, 0.25) * (0.35 * bounce * ao)
    colour = albedo * diffuse + vec3(KEY_COL) * (fresnel * highlight * ndl * shadow) \
        + sky(vec3(rd.x, ti.abs(rd.y), rd.z)) * (0.25 * fresnel * ao)
    return colour


@ti.func
def tone_map(c: vec3) -> vec3:
    """ACES filmic fit (Narkowicz 2015) with exposure 0.6 folded into its constants (so no
    backend can re-associate the exposure differently): linear in, display-linear out."""
    return ti.math.clamp((c * (0.9036 * c + 0.018)) / (c * (0.8748 * c + 0.354) + 0.14), 0.0, 1.0)


@ti.func
def fog(colour: vec3, rd: vec3, t: ti.f32) -> vec3:
    k = t * 0.045
    f = 1.0 - 1.0 / (1.0 + k * k)
    return lerp(colour, sky(rd), f)




@ti.func
def primary_ray(fwd: vec3, right: vec3, up: vec3, row, col, inv_w: ti.f32, inv_h: ti.f32):
    """Unit direction (lane components) through the centre of pixel (row, col) (row 0 at the top; col a lane
    value)."""
    u = (ti.cast(col, ti.f32) + 0.5) * inv_w * 2.0 - 1.0
    v = 1.0 - (ti.cast(row, ti.f32) + 0.5) * inv_h * 2.0
    dx = fwd.x + right.x * u + up.x * v
    dy = fwd.y + right.y * u + up.y * v
    dz = fwd.z + right.z * u + up.z * v
    norm = ti.sqrt(dx * dx + dy * dy + dz * dz + 0.0)  # (+ 0.0: Taichi's vec3.norm(), which this once was)
    return dx / norm, dy / norm, dz / norm


EDGE_MAX_PX = 8.0  # local closest approaches farther than this (in pixel footprints) are not edge candidates


def march_state(lanes: int):
    """The struct type of a primary ray's march over `lanes` rays (1: one ray, plain f32/i32 fields).

    hit, t: whether and where it hit (after REFINE_STEPS more steps); steps: iterations;
    near_t, near_ratio: its closest approach before any hit, in pixel footprints (the
    forward renderer's coverage of near misses); edge0_*, edge1_*: its two deepest local
    closest approaches before a hit, as ratio and bracket (lo, hi): the occluding edges the
    ray passed (the differentiable renderer's silhouettes, hit-to-hit included). While it
    runs: refined (steps since the hit), r1, t1 and r2, t2 (ratio and t of the previous two
    steps), done (1 once the march has stopped).
    """
    f = ti.f32 if lanes == 1 else ti.types.vector(lanes, ti.f32)
    i = ti.i32 if lanes == 1 else ti.types.vector(lanes, ti.i32)
    return ti.types.struct(hit=i, t=f, steps=i, near_t=f, near_ratio=f, edge0_ratio=f, edge0_lo=f, edge0_hi=f,
                           edge1_ratio=f, edge1_lo=f, edge1_hi=f, refined=i, r1=f, r2=f, t1=f, t2=f, done=i)


class _MarchStates(dict):
    """lanes -> `march_state(lanes)`, made on first use: a kernel indexes this (a Python call in a kernel would be
    traced with a warning)."""

    def __missing__(self, lanes: int):
        self[lanes] = march_state(lanes)
        return self[lanes]


MARCH_STATES = _MarchStates()


@ti.func
def march_start(state: ti.template(), x):
    """A march of type `state` (`march_state`) before its first step; x: any lane value of its width."""
    zero, zero_i, far = like(x, 0.0), like(x, 0), like(x, 1e9)
    return state(hit=zero_i, t=zero, steps=zero_i, near_t=zero, near_ratio=far, edge0_ratio=far, edge0_lo=zero,
                 edge0_hi=zero, edge1_ratio=far, edge1_lo=zero, edge1_hi=zero, refined=zero_i, r1=far, r2=far,
                 t1=zero, t2=zero, done=zero_i)


@ti.func
def march_step(m: ti.template(), ro: vec3, dx, dy, dz, pixel: ti.f32, s: Scene):
    """One sphere-tracing step of the running lanes of march m (see `march_state`); sets `done` where a lane
    stops. Lanes already done keep their state."""
    out = m
    live = m.done == 0
    t = m.t
    d, _ = scene_distance(ro.x + dx * t, ro.y + dy * t, ro.z + dz * t, s, False)
    out.steps = m.steps + ti.select(live, 1, 0)
    was_hit = live & (m.hit != 0)
    hits = live & (m.hit == 0) & (d < HIT_EPS * t)
    misses = live & (m.hit == 0) & (hits == 0)
    out.refined = ti.select(was_hit, m.refined + 1, ti.select(hits, 1, m.refined))
    out.hit = ti.select(hits, 1, m.hit)
    ratio = d / (pixel * t + 1e-6)
    nearer = misses & (ratio < m.near_ratio)
    out.near_ratio = ti.select(nearer, ratio, m.near_ratio)
    out.near_t = ti.select(nearer, t, m.near_t)
    r1 = m.r1
    edge = misses & (r1 < m.r2) & (r1 <= ratio) & (r1 < EDGE_MAX_PX)  # the previous step was a local closest approach
    deepest = edge & (r1 < m.edge0_ratio)
    second = edge & (deepest == 0) & (r1 < m.edge1_ratio)
    out.edge1_ratio = ti.select(deepest, m.edge0_ratio, ti.select(second, r1, m.edge1_ratio))
    out.edge1_lo = ti.select(deepest, m.edge0_lo, ti.select(second, m.t2, m.edge1_lo))
    out.edge1_hi = ti.select(deepest, m.edge0_hi, ti.select(second, t, m.edge1_hi))
    out.edge0_ratio = ti.select(deepest, r1, m.edge0_ratio)
    out.edge0_lo = ti.select(deepest, m.t2, m.edge0_lo)
    out.edge0_hi = ti.select(deepest, t, m.edge0_hi)
    out.r2 = ti.select(misses, r1, m.r2)
    out.t2 = ti.select(misses, m.t1, m.t2)
    out.r1 = ti.select(misses, ratio, m.r1)
    out.t1 = ti.select(misses, t, m.t1)
    t = t + d
    out.t = ti.select(live, t, m.t)
    stop = (out.refined == REFINE_STEPS) | ((out.hit == 0) & ((t > T_MAX) | ((dy > 0.0) & (ro.y + dy * t > SCENE_TOP))))
    out.done = ti.select(live & stop, 1, m.done)  # (out.hit == 0: nothing more to hit)
    return out


@ti.func
def march(state: ti.template(), ro: vec3, dx, dy, dz, pixel: ti.f32, s: Scene):
    """Sphere-trace the lane ray(s) (ro, d): a march of type `state` (`march_state`), until every lane is done."""
    m = march_start(state, dx)
    for _ in range(MAX_STEPS):
        m = march_step(m, ro, dx, dy, dz, pixel, s)
        if all_lanes(m.done != 0):
            break
    return m


@ti.func
def camera(prm: ti.template()):
    """The camera's position, right, up and forward axes (`P_CAM_*`) from the packed parameters."""
    ro = vec3(prm[P_CAM_POS], prm[P_CAM_POS + 1], prm[P_CAM_POS + 2])
    right = vec3(prm[P_CAM_RIGHT], prm[P_CAM_RIGHT + 1], prm[P_CAM_RIGHT + 2])
    up = vec3(prm[P_CAM_UP], prm[P_CAM_UP + 1], prm[P_CAM_UP + 2])
    fwd = vec3(prm[P_CAM_FWD], prm[P_CAM_FWD + 1], prm[P_CAM_FWD + 2])
    return ro, right, up, fwd


@quick("cpu")  # compiles in seconds, not a minute, and runs as fast on the cpu (engine/compile_effort.py)
@ti.kernel
def render(prm: ti.types.ndarray(dtype=ti.f32, ndim=1), rgb: ti.types.ndarray(dtype=ti.f32, ndim=3),
           depth: ti.types.ndarray(dtype=ti.f32, ndim=2), normal: ti.types.ndarray(dtype=ti.f32, ndim=3),
           steps: ti.types.ndarray(dtype=ti.i32, ndim=2), lanes: ti.template()):
    """The frame, `lanes` pixels of a row per thread (engine.kernels.lanes: a packet on the cpu, 1 on a gpu)."""
    height, width = rgb.shape[0], rgb.shape[1]
    inv_w = 1.0 / ti.cast(width, ti.f32)
    inv_h = 1.0 / ti.cast(height, ti.f32)
    # small work units: pixel cost varies 10x across the frame (sky vs shadowed geometry),
    # so the cpu backend's threads need fine-grained chunks to finish together
    ti.loop_config(block_dim=ti.static(max(128 // lanes, 8)))
    for row, packet in ti.ndrange(height, (width + lanes - 1) // lanes):
        s = load_scene(prm)
        ro, right, up, fwd = camera(prm)
        dx, dy, dz = primary_ray(fwd, right, up, row, packet_indices(packet, width, lanes), inv_w, inv_h)
        m = march(MARCH_STATES[lanes], ro, dx, dy, dz, prm[P_PIXEL], s)
        # shade the hit, or the surface a near miss grazed (blended by the share of the pixel it covers)
        t = ti.select(m.hit == 0, m.near_t, m.t)
        cover = ti.select(m.hit == 0, 1.0 - ti.math.smoothstep(0.0, 1.0, m.near_ratio), 1.0)
        shaded = cover > 0.0
        px, py, pz = ro.x + dx * t, ro.y + dy * t, ro.z + dz * t
        nx, ny, nz, mat, shadow, ao = like(t, 0.0), like(t, 0.0), like(t, 0.0), like(t, 0.0), like(t, 0.0), \
            like(t, 0.0)
        if any_lane(shaded):
            t0, t1, t2, t3, _, mat = surface_at(px, py, pz, s)
            nx, ny, nz = normal_from_taps(t0, t1, t2, t3)
            lit = shaded & (nx * s.sun.x + ny * s.sun.y + nz * s.sun.z > 0.0)
            shadow = soft_shadow(px + nx * 0.002, py + ny * 0.002, pz + nz * 0.002, s, lit)
            ao = ambient_occlusion(px, py, pz, nx, ny, nz, s)
        for j in ti.static(range(lanes)):  # each lane's colour, one ray at a time
            col = packet * lanes + j
            if col < width:
                rd = vec3(lane(dx, j), lane(dy, j), lane(dz, j))
                tj = lane(t, j)
                colour = sky(rd)
                n = vec3(0.0)
                if lane(shaded, j):
                    nj = vec3(lane(nx, j), lane(ny, j), lane(nz, j))
                    lit = light(vec3(lane(px, j), lane(py, j), lane(pz, j)), rd, tj, nj,
                                ti.cast(lane(mat, j), ti.i32), lane(shadow, j), lane(ao, j), s)
                    colour = lerp(colour, fog(lit, rd, tj), lane(cover, j))
                    if lane(m.hit, j) != 0:
                        n = nj
                colour = tone_map(colour)
                for k in ti.static(range(3)):
                    rgb[row, col, k] = colour[k]
                    normal[row, col, k] = n[k]
                depth[row, col] = ti.select(lane(m.hit, j) != 0, tj, T_MAX)
                steps[row, col] = lane(m.steps, j)
