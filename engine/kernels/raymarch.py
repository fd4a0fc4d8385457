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
"""
import taichi as ti

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
@ti.func
def length(v):
    """|v|, with a derivative of 0 instead of 0 * inf = NaN at v = 0 (a point on a segment's axis or inside a
    box: Taichi's adjoint of sqrt at 0). Equal to v.norm() bit for bit for |v|^2 >= 1e-30."""
    return ti.sqrt(ti.max(v.dot(v), 1e-30))


@ti.func
def sd_box(p: vec3, half: vec3) -> ti.f32:
    q = ti.abs(p) - half
    return length(ti.max(q, 0.0)) + ti.min(ti.max(q.x, ti.max(q.y, q.z)), 0.0)


@ti.func
def sd_segment2(p: vec2, a: vec2, b: vec2) -> ti.f32:
    pa = p - a
    ba = b - a
    h = ti.math.clamp(pa.dot(ba) / ba.dot(ba), 0.0, 1.0)
    return length(pa - ba * h)


@ti.func
def extrude(d2: ti.f32, z: ti.f32, half: ti.f32) -> ti.f32:
    """Exact distance to a 2D shape (distance d2) extruded over |z| <= half."""
    w = vec2(d2, ti.abs(z) - half)
    return ti.min(ti.max(w.x, w.y), 0.0) + length(ti.max(w, 0.0))


@ti.func
def sd_arc(p: vec2, ra: ti.f32) -> ti.f32:
    """Centre line of a 240-degree arc of radius ra (gap around -y)."""
    q = vec2(ti.abs(p.x), p.y)
    d = ti.abs(length(q) - ra)
    if _S_SC[1] * q.x > _S_SC[0] * q.y:
        d = length(q - vec2(_S_SC[0] * ra, _S_SC[1] * ra))
    return d


@ti.func
def rot2(p: vec2, cs: ti.template()) -> vec2:
    return vec2(cs[0] * p.x - cs[1] * p.y, cs[1] * p.x + cs[0] * p.y)


@ti.func
def glyph(g: ti.i32, p: vec2) -> ti.f32:
    """Distance to the centre lines of letter g's strokes (tile-local xy)."""
    d = 0.0
    if g == 0:  # S
        top = rot2(p - vec2(0.0, _S_R), _S_TOP_ROT)
        bot = rot2(p + vec2(0.0, _S_R), _S_BOT_ROT)
        d = ti.min(sd_arc(top, _S_R), sd_arc(bot, _S_R))
    elif g == 1:  # H
        q = vec2(ti.abs(p.x), p.y)
        d = ti.min(sd_segment2(q, vec2(0.1, -0.155), vec2(0.1, 0.155)),
                   sd_segment2(p, vec2(-0.1, 0.0), vec2(0.1, 0.0)))
    elif g == 2:  # A
        q = vec2(ti.abs(p.x), p.y)
        d = ti.min(sd_segment2(q, vec2(0.0, 0.155), vec2(0.115, -0.155)),
                   sd_segment2(p, vec2(-0.062, -0.04), vec2(0.062, -0.04)))
    elif g == 3:  # N
        q = vec2(ti.abs(p.x), p.y)
        d = ti.min(sd_segment2(q, vec2(0.1, -0.155), vec2(0.1, 0.155)),
                   sd_segment2(p, vec2(-0.1, 0.155), vec2(0.1, -0.155)))
    else:  # O: outline of a stadium
        d = ti.abs(sd_segment2(p, vec2(0.0, -0.065), vec2(0.0, 0.065)) - 0.095)
    return d


@ti.func
def sd_tile(u: vec3, g: ti.i32) -> vec2:
    """A letter tile in its local frame: (distance, material). The letter stands proud of the front
    face (+z) only: the back is blank, so the fallen tile, lying on its face, shows its back."""
    slab = sd_box(u, vec3(TILE_HALF[0] - TILE_ROUND, TILE_HALF[1] - TILE_ROUND,
                          TILE_HALF[2] - TILE_ROUND)) - TILE_ROUND
    letter = extrude(glyph(g, vec2(u.x, u.y)) - (STROKE - 0.008), u.z - LETTER_HALF_DEPTH, LETTER_HALF_DEPTH) - 0.008
    res = vec2(slab, M_TILE)
    if letter < slab:
        res = vec2(letter, M_LETTER)
    return res


@ti.func
def lerp(a, b, w):
    """a*(1-w) + b*w, written so: NIR turns `a + (b-a)*w` into its flrp instruction and lowers
    that back to this form, so only this form evaluates the same on LLVM and on lavapipe."""
    return a * (1.0 - w) + b * w


@ti.func
def closer(a: vec2, b: vec2) -> vec2:
    res = a
    if b.x < a.x:
        res = b
    return res


# ---------------------------------------------------------------- scene parts
@ti.func
def sd_table(p: vec3) -> vec2:
    # a cheap lower bound: the largest separation along one axis from the table's box
    res = vec2(ti.max(p.y - TABLE_TOP, ti.max(ti.abs(p.x) - 1.95, ti.abs(p.z) - 0.6)), M_BOUND)
    if p.y < NEAR_TABLE[1] and ti.abs(p.x) < NEAR_TABLE[0] and ti.abs(p.z) < NEAR_TABLE[2]:
        top = sd_box(p - vec3(0.0, TABLE_TOP - 0.025, 0.0), vec3(1.94, 0.015, 0.59)) - 0.01
        leg = sd_box(vec3(ti.abs(p.x) - 1.8, p.y - 0.375, ti.abs(p.z) - 0.48), vec3(0.035, 0.375, 0.035)) - 0.008
        res = vec2(ti.min(top, leg), M_TABLE)
    return res


@ti.func
def slot_glyph(i: ti.i32) -> ti.i32:
    g = 0
    for s in ti.static(range(N_SLOTS)):
        if i == s:
            g = SLOT_GLYPHS[s]
    return g


@ti.func
def _tile_candidate(res: vec2, p: vec3, s: Scene, rel: vec3, i0: ti.i32, k, near_row: ti.i32,
                    near_moving: ti.i32) -> vec2:
    """Candidate k of `sd_tiles`: standing tile i0 + k (k < 2) or the moving tile (k == 2)."""
    i = i0 + k
    u = p - vec3(SLOT_X0 + SLOT_SPACING * ti.cast(i, ti.f32), TILE_Y, ROW_Z)
    g = slot_glyph(i)
    usable = near_row and 0 <= i < N_SLOTS and i != MOVING_SLOT and k < 2
    if k == 2:
        u = s.tile_rot @ rel
        g = SLOT_GLYPHS[MOVING_SLOT]
        usable = near_moving
    out = res
    if usable:
        out = closer(res, sd_tile(u, g))
    return out


@ti.func
def sd_tiles(p: vec3, s: Scene, unrolled: ti.template()) -> vec2:
    """The standing tiles and the moving one, with one inlined tile SDF for all of them.

    Tiles repeat along x, so only the two slots around p.x can hold the nearest standing
    tile; the third candidate is the moving tile. Far from all of them, the distance to
    their bounding volumes stands in (it is never larger than the true distance).
    `unrolled` (differentiated kernels): three inlined copies instead of a dynamic loop,
    whose loop-carried minimum Taichi's reverse mode gets silently wrong (measured).
    """
    row_bound = sd_box(p - vec3(0.0, TILE_Y, ROW_Z), vec3(1.72, 0.25, 0.06))
    rel = p - s.tile_pos
    moving_dist = length(rel)
    moving_bound = moving_dist - 0.32
    near_row = row_bound < BOUND_MARGIN
    near_moving = moving_dist < NEAR_MOVING
    res = vec2(ti.min(row_bound, moving_bound), M_BOUND)
    if near_row or near_moving:
        # each group is either evaluated exactly or stands in with its bound
        res = vec2(1e9, M_BOUND)
        if not near_row:
            res = vec2(row_bound, M_BOUND)
        if not near_moving:
            res = closer(res, vec2(moving_bound, M_BOUND))
        i0 = ti.cast(ti.floor((p.x - SLOT_X0) / SLOT_SPACING), ti.i32)
        if ti.static(unrolled):
            for k in ti.static(range(3)):
                res = _tile_candidate(res, p, s, rel, i0, k, near_row, near_moving)
        else:
            for k in range(3):  # a dynamic loop: one inlined copy of the tile SDF, not three
                res = _tile_candidate(res, p, s, rel, i0, k, near_row, near_moving)
    return res


@ti.func
def sd_arm(p: vec3, s: Scene) -> vec2:
    """Pedestal, turret, shoulder bracket and the planar arm, in the arm plane's coordinates.

    Two groups, each behind its own bound: the base (a cylinder of radius 0.42 up to 1.04 m
    around the base axis) and the moving links (0.2 m around the polyline shoulder, elbow,
    wrist, tool centre, within 0.32 m of the arm plane)."""
    dx = p.x - s.base.x
    dz = p.z - s.base.y
    radial = length(vec2(dx, dz))
    fwd = dx * s.base.w + dz * s.base.z  # forward = (sin yaw, cos yaw) in xz
    lat = dx * s.base.z - dz * s.base.w
    res = vec2(extrude(radial - 0.42, p.y - 0.52, 0.52), M_BOUND)
    if radial < NEAR_BASE[0] and p.y < NEAR_BASE[1]:
        pedestal = extrude(radial - 0.25, p.y - 0.3, 0.3) - 0.02
        plate = extrude(radial - 0.4, p.y - 0.02, 0.02)
        res = vec2(ti.min(pedestal, plate), M_PEDESTAL)
        turret = extrude(radial - 0.2, p.y - 0.72, 0.1) - 0.02
        bracket = sd_box(vec3(fwd, p.y - 0.9, lat), vec3(0.12, 0.08, 0.15)) - 0.03
        res = closer(res, vec2(ti.min(turret, bracket), M_PAINT))
    q = vec2(fwd, p.y)
    tcp = s.wrist + s.tool * TCP_OFFSET
    to_links = ti.min(sd_segment2(q, s.shoulder, s.elbow),
                      ti.min(sd_segment2(q, s.elbow, s.wrist), sd_segment2(q, s.wrist, tcp)))
    bound = ti.max(to_links - 0.2, ti.abs(lat) - 0.32)
    if to_links < NEAR_LINKS[0] and ti.abs(lat) < NEAR_LINKS[1]:
        upper = extrude(sd_segment2(q, s.shoulder, s.elbow) - 0.055, lat, 0.06) - 0.03
        fore = extrude(sd_segment2(q, s.elbow, s.wrist) - 0.04, lat, 0.045) - 0.025
        res = closer(res, vec2(ti.min(upper, fore), M_PAINT))
        joints = ti.min(extrude(length(q - s.shoulder) - 0.115, lat, 0.185) - 0.012,
                        ti.min(extrude(length(q - s.elbow) - 0.09, lat, 0.105) - 0.01,
                               extrude(length(q - s.wrist) - 0.06, lat, 0.075) - 0.01))
        res = closer(res, vec2(joints, M_JOINT))
        v = q - s.wrist
        along = v.x * s.tool.x + v.y * s.tool.y
        across = v.y * s.tool.x - v.x * s.tool.y
        palm = sd_box(vec3(along - 0.1, across, lat), vec3(0.035, 0.05, 0.27)) - 0.012
        finger = sd_box(vec3(along - 0.215, across, ti.abs(lat) - s.grip), vec3(0.072, 0.042, 0.009)) - 0.004
        res = closer(res, vec2(ti.min(palm, finger), M_STEEL))
    else:
        res = closer(res, vec2(bound, M_BOUND))
    return res


@ti.func
def scene_sdf(p: vec3, s: Scene, unrolled: ti.template()) -> vec2:
    """(distance, material) of the whole scene at p; `unrolled` for differentiated kernels (see sd_tiles)."""
    res = vec2(p.y, M_FLOOR)
    res = closer(res, sd_table(p))
    res = closer(res, sd_tiles(p, s, unrolled))
    res = closer(res, sd_arm(p, s))
    return res


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
    """Tetrahedral tap k of `normal_at`: (+,-,-), (-,-,+), (-,+,-), (+,+,+), each sign from the bits of k."""
    sx = 1.0 if (k == 0 or k == 3) else -1.0
    sy = 1.0 if k >= 2 else -1.0
    sz = 1.0 if (k == 1 or k == 3) else -1.0
    return vec3(sx, sy, sz)


NORMAL_EPS = 0.0005


@ti.func
def tap_distance(p: vec3, k, s: Scene) -> ti.f32:
    """The scene distance at `normal_at`'s tap k around p (at p + tap_sign(k) * NORMAL_EPS)."""
    return scene_sdf(p + tap_sign(k) * NORMAL_EPS, s, False).x


@ti.func
def with_tap(taps: ti.math.vec4, k, d: ti.f32) -> ti.math.vec4:
    """taps with tap k (a runtime index) set to d, by a select per component: `taps[k] = d` in `normal_at`'s loop
    left the cpu's image bit for bit as it was but moved vulkan's (lavapipe): 172 pixels of the 2048x1024 parity
    frame off by more than 1e-4 instead of 14 (measured, docs/RESULTS.md)."""
    return ti.select(ti.math.ivec4(0, 1, 2, 3) == k, d, taps)


@ti.func
def tap_normal(taps: ti.math.vec4) -> vec3:
    """The unit normal from the distances at `normal_at`'s four taps (tetrahedral differences); `length`, so a
    differentiated caller (`raymarch_grad.shade_slots`) gets no NaN where the taps cancel."""
    n = vec3(0.0)
    for k in ti.static(range(4)):
        n += tap_sign(k) * taps[k]
    return n / length(n)


@ti.func
def normal_at(p: vec3, s: Scene) -> vec3:
    """Tetrahedral differences of the distance: 4 taps in a loop (one inlined SDF copy; untaped only)."""
    taps = ti.math.vec4(0.0)
    for k in range(4):
        taps = with_tap(taps, k, tap_distance(p, k, s))
    return tap_normal(taps)


@ti.func
def soft_shadow(ro: vec3, rd: vec3, s: Scene) -> ti.f32:
    """Penumbra from the closest approach to occluders (iq's improved soft shadow:
    estimates the true closest distance between two steps, which removes banding)."""
    res = 1.0
    t = 0.015
    prev_h = 1e10
    for _ in range(SHADOW_STEPS):
        hm = scene_sdf(ro + rd * t, s, False)
        h = hm.x
        if hm.y != M_BOUND:
            y = h * h / (2.0 * prev_h)
            closest = ti.sqrt(ti.max(h * h - y * y, 0.0))
            res = ti.min(res, 10.0 * closest / ti.max(t - y, 1e-4))
            prev_h = h
        else:
            # A bound's distance is no distance to the surfaces the next sample measures: kept as
            # prev_h it made y exceed h there (closest approach 0: a hard black speck on the floor).
            prev_h = 1e10
        t += ti.math.clamp(h, 0.01, 0.5)
        if res < 0.001 or t > 8.0 or ro.y + rd.y * t > SCENE_TOP:  # nothing stands above SCENE_TOP
            break
    res = ti.math.clamp(res, 0.0, 1.0)
    return res * res * (3.0 - 2.0 * res)


@ti.func
def ambient_occlusion(p: vec3, n: vec3, s: Scene) -> ti.f32:
    occ = 0.0
    weight = 1.0
    for i in range(5):
        h = 0.012 + 0.04 * ti.cast(i, ti.f32)
        occ += ti.max(h - scene_sdf(p + n * h, s, False).x, 0.0) * weight
        weight *= 0.8
    return ti.math.clamp(1.0 - 2.5 * occ, 0.0, 1.0)


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


@ti.func
def shade(p: vec3, rd: vec3, t: ti.f32, s: Scene):
    """Lit colour at a surface point, and its normal."""
    n = normal_at(p, s)
    m = ti.cast(scene_sdf(p, s, False).y, ti.i32)
    shadow = 0.0
    if n.dot(s.sun) > 0.0:
        shadow = soft_shadow(p + n * 0.002, s.sun, s)
    ao = ambient_occlusion(p, n, s)
    return light(p, rd, t, n, m, shadow, ao, s), n


MAX_SQUARINGS = 7  # the highest shininess of `material`, as a number of squarings


@ti.func
def light(p: vec3, rd: vec3, t: ti.f32, n: vec3, m: ti.i32, shadow: ti.f32, ao: ti.f32, s: Scene) -> vec3:
    """Colour at surface point p (normal n, material m) seen along rd, given its key-light
    visibility `shadow` and ambient occlusion `ao`: the shading every renderer shares."""
    albedo, spec, squarings = material(m, p, t, s)
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
    sky_amount = 0.5 + 0.5 * n.y
    bounce = ti.math.clamp(0.5 - 0.5 * n.y, 0.0, 1.0)
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
def primary_ray(fwd: vec3, right: vec3, up: vec3, row: ti.i32, col: ti.i32, inv_w: ti.f32, inv_h: ti.f32) -> vec3:
    """Unit direction through the centre of pixel (row, col) (row 0 at the top)."""
    u = (ti.cast(col, ti.f32) + 0.5) * inv_w * 2.0 - 1.0
    v = 1.0 - (ti.cast(row, ti.f32) + 0.5) * inv_h * 2.0
    rd = fwd + right * u + up * v
    return rd / rd.norm()


EDGE_MAX_PX = 8.0  # local closest approaches farther than this (in pixel footprints) are not edge candidates


@ti.dataclass
class March:
    """A primary ray's march: what it found, and its state while it runs (`march_step`).

    hit, t: whether and where it hit (after REFINE_STEPS more steps); steps: iterations;
    near_t, near_ratio: its closest approach before any hit, in pixel footprints (the
    forward renderer's coverage of near misses); edge0, edge1: its two deepest local
    closest approaches before a hit, as (ratio, bracket lo, bracket hi): the occluding
    edges the ray passed (the differentiable renderer's silhouettes, hit-to-hit included).
    While it runs: refined (steps since the hit), r1, t1 and r2, t2 (ratio and t of the
    previous two steps), done (1 once the march has stopped).
    """
    hit: ti.i32
    t: ti.f32
    steps: ti.i32
    near_t: ti.f32
    near_ratio: ti.f32
    edge0: vec3
    edge1: vec3
    refined: ti.i32
    r1: ti.f32
    r2: ti.f32
    t1: ti.f32
    t2: ti.f32
    done: ti.i32


@ti.func
def march_start() -> March:
    """A march before its first step."""
    return March(hit=0, t=0.0, steps=0, near_t=0.0, near_ratio=1e9, edge0=vec3(1e9, 0.0, 0.0),
                 edge1=vec3(1e9, 0.0, 0.0), refined=0, r1=1e9, r2=1e9, t1=0.0, t2=0.0, done=0)


@ti.func
def march_step(m: March, ro: vec3, rd: vec3, pixel: ti.f32, s: Scene) -> March:
    """One sphere-tracing step of a running march (see `March`); sets `done` where the march stops."""
    out = m
    out.steps += 1
    t = m.t
    res = scene_sdf(ro + rd * t, s, False)
    if m.hit != 0:
        out.refined += 1
    elif res.x < HIT_EPS * t:
        out.hit = 1
        out.refined = 1
    else:
        ratio = res.x / (pixel * t + 1e-6)
        if ratio < out.near_ratio:
            out.near_ratio = ratio
            out.near_t = t
        r1 = m.r1
        if r1 < m.r2 and r1 <= ratio and r1 < EDGE_MAX_PX:  # the previous step was a local closest approach
            found = vec3(r1, m.t2, t)
            if r1 < out.edge0.x:
                out.edge1 = out.edge0
                out.edge0 = found
            elif r1 < out.edge1.x:
                out.edge1 = found
        out.r2, out.t2 = r1, m.t1
        out.r1, out.t1 = ratio, t
    t += res.x
    out.t = t
    if out.refined == REFINE_STEPS:
        out.done = 1
    if out.hit == 0 and (t > T_MAX or (rd.y > 0.0 and ro.y + rd.y * t > SCENE_TOP)):  # nothing more to hit
        out.done = 1
    return out


@ti.func
def march(ro: vec3, rd: vec3, pixel: ti.f32, s: Scene) -> March:
    """Sphere-trace one primary ray (see `March`)."""
    m = march_start()
    for _ in range(MAX_STEPS):
        m = march_step(m, ro, rd, pixel, s)
        if m.done != 0:
            break
    return m


@ti.func
def march_pair(ro: vec3, rd_a: vec3, rd_b: vec3, pixel: ti.f32, s: Scene):
    """`march` of two rays from one origin, their steps interleaved in one loop: each ray's steps are a
    chain of dependent operations (t -> SDF -> t), so two independent chains keep a CPU core's units
    busier (measured: ~15 % faster per ray on this machine's cpu backend). Each ray's arithmetic is
    `march`'s, bit for bit."""
    a = march_start()
    b = march_start()
    for _ in range(MAX_STEPS):
        if a.done == 0:
            a = march_step(a, ro, rd_a, pixel, s)
        if b.done == 0:
            b = march_step(b, ro, rd_b, pixel, s)
        if a.done != 0 and b.done != 0:
            break
    return a, b


@ti.kernel
def render(prm: ti.types.ndarray(dtype=ti.f32, ndim=1), rgb: ti.types.ndarray(dtype=ti.f32, ndim=3),
           depth: ti.types.ndarray(dtype=ti.f32, ndim=2), normal: ti.types.ndarray(dtype=ti.f32, ndim=3),
           steps: ti.types.ndarray(dtype=ti.i32, ndim=2)):
    height, width = rgb.shape[0], rgb.shape[1]
    inv_w = 1.0 / ti.cast(width, ti.f32)
    inv_h = 1.0 / ti.cast(height, ti.f32)
    # small work units: pixel cost varies 10x across the frame (sky vs shadowed geometry),
    # so the cpu backend's threads need fine-grained chunks to finish together
    ti.loop_config(block_dim=128)
    for row, col in ti.ndrange(height, width):
        s = load_scene(prm)
        ro = vec3(prm[P_CAM_POS], prm[P_CAM_POS + 1], prm[P_CAM_POS + 2])
        right = vec3(prm[P_CAM_RIGHT], prm[P_CAM_RIGHT + 1], prm[P_CAM_RIGHT + 2])
        up = vec3(prm[P_CAM_UP], prm[P_CAM_UP + 1], prm[P_CAM_UP + 2])
        fwd = vec3(prm[P_CAM_FWD], prm[P_CAM_FWD + 1], prm[P_CAM_FWD + 2])
        rd = primary_ray(fwd, right, up, row, col, inv_w, inv_h)
        m = march(ro, rd, prm[P_PIXEL], s)
        # shade the hit, or the surface a near miss grazed (blended by the share of the pixel
        # it covers): one shading call site keeps the kernel small
        t = m.t
        colour = sky(rd)
        n = vec3(0.0)
        d_out = T_MAX
        cover = 1.0
        if m.hit == 0:
            cover = 1.0 - ti.math.smoothstep(0.0, 1.0, m.near_ratio)
            t = m.near_t
        else:
            d_out = t
        if cover > 0.0:
            lit, n_lit = shade(ro + rd * t, rd, t, s)
            colour = lerp(colour, fog(lit, rd, t), cover)
            if m.hit != 0:
                n = n_lit
        colour = tone_map(colour)
        for k in ti.static(range(3)):
            rgb[row, col, k] = colour[k]
            normal[row, col, k] = n[k]
        depth[row, col] = d_out
        steps[row, col] = m.steps
