"""Dr.Jit's side of the inverse-rendering benchmark: the differentiable robot-arm render on its LLVM backend.

A port of `engine.diff_render` + `engine/kernels/raymarch_grad.py` (and the scene of
`engine/kernels/raymarch.py`, the kinematics of `engine/kernels/kinematics.py`) with
Dr.Jit's AD types (`drjit.llvm.ad`), the same algorithm step for step so that images
and gradients agree (`bench/invert.py` checks them before timing):

1. hold, detached: sphere-trace every pixel (`dr.while_loop`), keep the hit and the two
   deepest local closest approaches before it (edge layers, refined by golden-section
   search), and per active slot its normal, material, ambient occlusion and the shadow
   ray's closest approach (refined the same way); then the SDF's spatial gradient at
   the six held sample points of every slot (reverse-mode AD in the points, scene detached);
2. under AD in theta: forward kinematics, the SDF at the held points, the Newton step
   t' = t - f / (grad f . d) for hits, the taps and the shadow point moved to first order,
   `light` and fog, the edge ratio f / (pixel footprint);
3. soft minimum (log-sum-exp, minimum subtracted) over the edge layers, compose, tone map;
4. the L2 image loss against the target, `dr.backward` -> d loss / d theta.

Every Python branch on a per-lane value is a symbolic `if` (`@dr.syntax`), so a
packet of lanes that is far from a part skips its detailed SDF as the Taichi kernels
do. Constants come from the Taichi modules (one source of the scene's numbers).
Imported only by `python -m app bench invert` and its test: Dr.Jit is a benchmark peer,
never a runtime dependency.
"""
from __future__ import annotations

import glob
import os

import numpy as np

# Dr.Jit loads the first libLLVM it finds; LLVM 15 (Debian 12's default) aborts the process on the
# `llvm.maximum` its kernels use ("Cannot select: fmaximum", measured), so point it at LLVM >= 16
# (Debian's libllvm19) unless the caller chose one.
_LLVM_MIN = 16
if "DRJIT_LIBLLVM_PATH" not in os.environ:
    for _path in sorted(glob.glob("/usr/lib/*-linux-gnu/libLLVM.so.*") + glob.glob("/usr/lib/*-linux-gnu/libLLVM-*.so"),
                        reverse=True):
        if any(f"LLVM{sep}{v}" in _path for v in range(_LLVM_MIN, 40) for sep in (".so.", "-")):
            os.environ["DRJIT_LIBLLVM_PATH"] = _path
            break

import drjit as dr  # noqa: E402
from drjit.llvm.ad import Array2f, Array3f, Bool, Float, Int, UInt32  # noqa: E402

if not dr.has_backend(dr.JitBackend.LLVM) or tuple(dr.detail.llvm_version()) < (_LLVM_MIN,):
    raise ImportError(f"Dr.Jit's LLVM backend needs libLLVM >= {_LLVM_MIN} (Debian: apt-get install libllvm19; "
                      f"or set DRJIT_LIBLLVM_PATH); found {dr.detail.llvm_version()}")

from engine.kernels import kinematics  # noqa: E402
from engine.kernels import raymarch  # noqa: E402
from engine.kernels import raymarch_grad  # noqa: E402
from engine.kernels.softmin import INACTIVE_RATIO  # noqa: E402

M_BOUND = float(raymarch.M_BOUND)


class Scene:
    """The per-evaluation scene (`raymarch.Scene`) as Dr.Jit values (size 1: broadcast over lanes)."""

    def __init__(self, v: list):
        yaw = v[kinematics.T_YAW]
        self.base = (Float(kinematics.BASE_XZ[0]), Float(kinematics.BASE_XZ[1]), dr.cos(yaw), dr.sin(yaw))
        a1 = v[kinematics.T_SHOULDER]
        a2 = a1 + v[kinematics.T_ELBOW]
        a3 = a2 + v[kinematics.T_WRIST]
        self.shoulder = Array2f(kinematics.SHOULDER[0], kinematics.SHOULDER[1])
        self.elbow = self.shoulder + kinematics.UPPER * Array2f(dr.cos(a1), dr.sin(a1))
        self.wrist = self.elbow + kinematics.FORE * Array2f(dr.cos(a2), dr.sin(a2))
        self.tool = Array2f(dr.cos(a3), dr.sin(a3))
        self.grip = v[kinematics.T_GRIP]
        self.tile_pos = Array3f(v[kinematics.T_TILE_POS], v[kinematics.T_TILE_POS + 1], v[kinematics.T_TILE_POS + 2])
        c, sn = dr.cos(v[kinematics.T_TILE_YAW]), dr.sin(v[kinematics.T_TILE_YAW])
        cb, sb = dr.cos(v[kinematics.T_TILE_TILT]), dr.sin(v[kinematics.T_TILE_TILT])
        self.tile_rot = ((c, Float(0.0), -sn), (sn * sb, cb, c * sb), (sn * cb, -sb, c * cb))
        self.paint = Array3f(*(v[kinematics.T_PAINT + j] for j in range(3)))
        self.tile = Array3f(*(v[kinematics.T_TILE + j] for j in range(3)))
        self.letter = Array3f(*(v[kinematics.T_LETTER + j] for j in range(3)))
        ce, se = dr.cos(v[kinematics.T_SUN_ELEVATION]), dr.sin(v[kinematics.T_SUN_ELEVATION])
        self.sun = Array3f(ce * dr.sin(v[kinematics.T_SUN_AZIMUTH]), se, ce * dr.cos(v[kinematics.T_SUN_AZIMUTH]))


def scene_of(theta: Float) -> Scene:
    """Forward kinematics from theta (Float of N_THETA, AD-tracked or not)."""
    return Scene([dr.gather(Float, theta, j) for j in range(kinematics.N_THETA)])


# ---------------------------------------------------------------- primitives
def length(v):
    return dr.sqrt(dr.maximum(dr.dot(v, v), 1e-30))


def vmax0(v):
    return dr.maximum(v, 0.0)


def sd_box(p: Array3f, half) -> Float:
    q = dr.abs(p) - Array3f(*half)
    return length(vmax0(q)) + dr.minimum(dr.maximum(q.x, dr.maximum(q.y, q.z)), 0.0)


def sd_segment2(p: Array2f, a, b) -> Float:
    a = Array2f(*a) if isinstance(a, tuple) else a
    b = Array2f(*b) if isinstance(b, tuple) else b
    pa = p - a
    ba = b - a
    h = dr.clip(dr.dot(pa, ba) / dr.dot(ba, ba), 0.0, 1.0)
    return length(pa - ba * h)


def extrude(d2, z, half):
    w = Array2f(d2, dr.abs(z) - half)
    return dr.minimum(dr.maximum(w.x, w.y), 0.0) + length(vmax0(w))


def sd_arc(p: Array2f, ra: float) -> Float:
    sc = raymarch._S_SC
    q = Array2f(dr.abs(p.x), p.y)
    d = dr.abs(length(q) - ra)
    return dr.select(sc[1] * q.x > sc[0] * q.y, length(q - Array2f(sc[0] * ra, sc[1] * ra)), d)


def rot2(p: Array2f, cs) -> Array2f:
    return Array2f(cs[0] * p.x - cs[1] * p.y, cs[1] * p.x + cs[0] * p.y)


def _glyph_s(p):
    top = rot2(p - Array2f(0.0, raymarch._S_R), raymarch._S_TOP_ROT)
    bot = rot2(p + Array2f(0.0, raymarch._S_R), raymarch._S_BOT_ROT)
    return dr.minimum(sd_arc(top, raymarch._S_R), sd_arc(bot, raymarch._S_R))


def _glyph_h(p):
    q = Array2f(dr.abs(p.x), p.y)
    return dr.minimum(sd_segment2(q, (0.1, -0.155), (0.1, 0.155)), sd_segment2(p, (-0.1, 0.0), (0.1, 0.0)))


def _glyph_a(p):
    q = Array2f(dr.abs(p.x), p.y)
    return dr.minimum(sd_segment2(q, (0.0, 0.155), (0.115, -0.155)), sd_segment2(p, (-0.062, -0.04), (0.062, -0.04)))


def _glyph_n(p):
    q = Array2f(dr.abs(p.x), p.y)
    return dr.minimum(sd_segment2(q, (0.1, -0.155), (0.1, 0.155)), sd_segment2(p, (-0.1, 0.155), (0.1, -0.155)))


def _glyph_o(p):
    return dr.abs(sd_segment2(p, (0.0, -0.065), (0.0, 0.065)) - 0.095)


GLYPHS = (_glyph_s, _glyph_h, _glyph_a, _glyph_n, _glyph_o)


def glyph(g, p: Array2f) -> Float:
    """Letter g's stroke centre lines; g a Python int (the moving tile) or an Int per lane (a switch)."""
    if isinstance(g, int):
        return GLYPHS[g](p)
    return dr.switch(UInt32(g), GLYPHS, p)


def closer(a, b):
    """(distance, material) pairs as tuples: the nearer of the two."""
    pick = b[0] < a[0]
    return dr.select(pick, b[0], a[0]), dr.select(pick, b[1], a[1])


def sd_tile(u: Array3f, g):
    th, tr = raymarch.TILE_HALF, raymarch.TILE_ROUND
    slab = sd_box(u, (th[0] - tr, th[1] - tr, th[2] - tr)) - tr
    letter = extrude(glyph(g, Array2f(u.x, u.y)) - (raymarch.STROKE - 0.008), u.z - raymarch.LETTER_HALF_DEPTH,
                     raymarch.LETTER_HALF_DEPTH) - 0.008
    return closer((slab, Float(raymarch.M_TILE)), (letter, Float(raymarch.M_LETTER)))


# ---------------------------------------------------------------- scene parts
@dr.syntax
def sd_table(p: Array3f):
    d = dr.maximum(p.y - raymarch.TABLE_TOP, dr.maximum(dr.abs(p.x) - 1.95, dr.abs(p.z) - 0.6))
    m = Float(M_BOUND)
    near = ((p.y < raymarch.NEAR_TABLE[1]) & (dr.abs(p.x) < raymarch.NEAR_TABLE[0])
            & (dr.abs(p.z) < raymarch.NEAR_TABLE[2]))
    if near:
        top = sd_box(p - Array3f(0.0, raymarch.TABLE_TOP - 0.025, 0.0), (1.94, 0.015, 0.59)) - 0.01
        leg = sd_box(Array3f(dr.abs(p.x) - 1.8, p.y - 0.375, dr.abs(p.z) - 0.48), (0.035, 0.375, 0.035)) - 0.008
        d = dr.minimum(top, leg)
        m = Float(raymarch.M_TABLE)
    return d, m


def slot_glyph(i: Int) -> Int:
    g = Int(0)
    for s in range(raymarch.N_SLOTS):
        g = dr.select(i == s, raymarch.SLOT_GLYPHS[s], g)
    return g


@dr.syntax
def sd_tiles(p: Array3f, s: Scene):
    row_bound = sd_box(p - Array3f(0.0, raymarch.TILE_Y, raymarch.ROW_Z), (1.72, 0.25, 0.06))
    rel = p - s.tile_pos
    moving_dist = length(rel)
    moving_bound = moving_dist - 0.32
    near_row = row_bound < raymarch.BOUND_MARGIN
    near_moving = moving_dist < raymarch.NEAR_MOVING
    d = dr.minimum(row_bound, moving_bound)
    m = Float(M_BOUND)
    if near_row | near_moving:
        d = dr.select(near_row, 1e9, row_bound)
        d = dr.select(~near_moving & (moving_bound < d), moving_bound, d)
        i0 = Int(dr.floor((p.x - raymarch.SLOT_X0) / raymarch.SLOT_SPACING))
        for k in range(2):
            i = i0 + k
            usable = near_row & (i >= 0) & (i < raymarch.N_SLOTS) & (i != raymarch.MOVING_SLOT)
            if usable:
                u = p - Array3f(raymarch.SLOT_X0 + raymarch.SLOT_SPACING * Float(i), raymarch.TILE_Y, raymarch.ROW_Z)
                d, m = closer((d, m), sd_tile(u, slot_glyph(i)))
        if near_moving:
            r = s.tile_rot
            u = Array3f(*(r[j][0] * rel.x + r[j][1] * rel.y + r[j][2] * rel.z for j in range(3)))
            d, m = closer((d, m), sd_tile(u, raymarch.SLOT_GLYPHS[raymarch.MOVING_SLOT]))
    return d, m


@dr.syntax
def sd_arm(p: Array3f, s: Scene):
    dx = p.x - s.base[0]
    dz = p.z - s.base[1]
    radial = length(Array2f(dx, dz))
    fwd = dx * s.base[3] + dz * s.base[2]
    lat = dx * s.base[2] - dz * s.base[3]
    d = extrude(radial - 0.42, p.y - 0.52, 0.52)
    m = Float(M_BOUND)
    if (radial < raymarch.NEAR_BASE[0]) & (p.y < raymarch.NEAR_BASE[1]):
        pedestal = extrude(radial - 0.25, p.y - 0.3, 0.3) - 0.02
        plate = extrude(radial - 0.4, p.y - 0.02, 0.02)
        d = dr.minimum(pedestal, plate)
        m = Float(raymarch.M_PEDESTAL)
        turret = extrude(radial - 0.2, p.y - 0.72, 0.1) - 0.02
        bracket = sd_box(Array3f(fwd, p.y - 0.9, lat), (0.12, 0.08, 0.15)) - 0.03
        d, m = closer((d, m), (dr.minimum(turret, bracket), Float(raymarch.M_PAINT)))
    q = Array2f(fwd, p.y)
    tcp = s.wrist + s.tool * raymarch.TCP_OFFSET
    to_links = dr.minimum(sd_segment2(q, s.shoulder, s.elbow),
                          dr.minimum(sd_segment2(q, s.elbow, s.wrist), sd_segment2(q, s.wrist, tcp)))
    bound = dr.maximum(to_links - 0.2, dr.abs(lat) - 0.32)
    if (to_links < raymarch.NEAR_LINKS[0]) & (dr.abs(lat) < raymarch.NEAR_LINKS[1]):
        upper = extrude(sd_segment2(q, s.shoulder, s.elbow) - 0.055, lat, 0.06) - 0.03
        fore = extrude(sd_segment2(q, s.elbow, s.wrist) - 0.04, lat, 0.045) - 0.025
        d, m = closer((d, m), (dr.minimum(upper, fore), Float(raymarch.M_PAINT)))
        joints = dr.minimum(extrude(length(q - s.shoulder) - 0.115, lat, 0.185) - 0.012,
                            dr.minimum(extrude(length(q - s.elbow) - 0.09, lat, 0.105) - 0.01,
                                       extrude(length(q - s.wrist) - 0.06, lat, 0.075) - 0.01))
        d, m = closer((d, m), (joints, Float(raymarch.M_JOINT)))
        v = q - s.wrist
        along = v.x * s.tool.x + v.y * s.tool.y
        across = v.y * s.tool.x - v.x * s.tool.y
        palm = sd_box(Array3f(along - 0.1, across, lat), (0.035, 0.05, 0.27)) - 0.012
        finger = sd_box(Array3f(along - 0.215, across, dr.abs(lat) - s.grip), (0.072, 0.042, 0.009)) - 0.004
        d, m = closer((d, m), (dr.minimum(palm, finger), Float(raymarch.M_STEEL)))
    else:
        d, m = closer((d, m), (bound, Float(M_BOUND)))
    return d, m


def scene_sdf(p: Array3f, s: Scene):
    """(distance, material as a float) of the whole scene at p."""
    res = (p.y, Float(raymarch.M_FLOOR))
    res = closer(res, sd_table(p))
    res = closer(res, sd_tiles(p, s))
    return closer(res, sd_arm(p, s))


# ---------------------------------------------------------------- shading
def tap_sign(k: int) -> Array3f:
    return Array3f(1.0 if k in (0, 3) else -1.0, 1.0 if k >= 2 else -1.0, 1.0 if k in (1, 3) else -1.0)


def smoothstep(e0, e1, x):
    t = dr.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def lerp(a, b, w):
    return a * (1.0 - w) + b * w


def sky(rd: Array3f) -> Array3f:
    k = dr.clip(rd.y * 1.6, 0.0, 1.0)
    k = k * (2.0 - k)
    return lerp(Array3f(*raymarch.SKY_HORIZON), Array3f(*raymarch.SKY_ZENITH), k)


def grid_line(x, width):
    f = x * 2.0 - dr.floor(x * 2.0)
    dist = dr.minimum(f, 1.0 - f) * 0.5
    return 1.0 - smoothstep(0.0, width, dist)


def material(m: Int, p: Array3f, t, s: Scene):
    """Albedo, specular strength and number of squarings per lane (`raymarch.material`)."""
    w = 0.004 + 0.0012 * t
    line = dr.maximum(grid_line(p.x, w), grid_line(p.z, w)) * 0.8
    table = (
        (raymarch.M_FLOOR, lerp(Array3f(*raymarch.FLOOR_BASE), Array3f(*raymarch.FLOOR_LINE), line), 0.02, 4),
        (raymarch.M_TABLE, Array3f(0.2, 0.11, 0.055), 0.06, 5),
        (raymarch.M_TILE, s.tile, 0.05, 4),
        (raymarch.M_LETTER, s.letter, 0.18, 6),
        (raymarch.M_PAINT, s.paint, 0.25, 6),
        (raymarch.M_JOINT, Array3f(0.07, 0.07, 0.08), 0.35, 6),
        (raymarch.M_STEEL, Array3f(0.55, 0.57, 0.6), 0.6, 7),
        (raymarch.M_PEDESTAL, Array3f(0.13, 0.13, 0.14), 0.15, 5),
    )
    albedo, spec, squarings = Array3f(0.5), Float(0.04), Int(4)
    for mat, a, sp, sq in table:
        is_m = m == mat
        albedo = dr.select(is_m, a, albedo)
        spec = dr.select(is_m, sp, spec)
        squarings = dr.select(is_m, sq, squarings)
    return albedo, spec, squarings


def light(p, rd, t, n, m, shadow, ao, s: Scene) -> Array3f:
    albedo, spec, squarings = material(m, p, t, s)
    key = s.sun
    ndl = dr.maximum(dr.dot(n, key), 0.0)
    half = key - rd
    half = half / length(half)
    ndh = dr.maximum(dr.dot(n, half), 0.0)
    highlight = ndh
    for i in range(raymarch.MAX_SQUARINGS):
        highlight = dr.select(i < squarings, highlight * highlight, highlight)
    ndv = dr.clip(-dr.dot(n, rd), 0.0, 1.0)
    f1 = 1.0 - ndv
    f2 = f1 * f1
    fresnel = lerp(spec, 1.0, f2 * f2 * f1)
    sky_amount = 0.5 + 0.5 * n.y
    bounce = dr.clip(0.5 - 0.5 * n.y, 0.0, 1.0)
    diffuse = Array3f(*raymarch.KEY_COL) * (ndl * shadow) + Array3f(*raymarch.SKY_ZENITH) * (1.3 * sky_amount * ao) \
        + Array3f(0.35, 0.3, 0.25) * (0.35 * bounce * ao)
    return albedo * diffuse + Array3f(*raymarch.KEY_COL) * (fresnel * highlight * ndl * shadow) \
        + sky(Array3f(rd.x, dr.abs(rd.y), rd.z)) * (0.25 * fresnel * ao)


def tone_map(c: Array3f) -> Array3f:
    return dr.clip((c * (0.9036 * c + 0.018)) / (c * (0.8748 * c + 0.354) + 0.14), 0.0, 1.0)


def fog(colour, rd, t):
    k = t * 0.045
    f = 1.0 - 1.0 / (1.0 + k * k)
    return lerp(colour, sky(rd), f)


def penumbra(ratio):
    res = dr.clip(raymarch_grad.PENUMBRA * ratio, 0.0, 1.0)
    return res * res * (3.0 - 2.0 * res)


# ---------------------------------------------------------------- the untaped hold
def camera_ray(cam: np.ndarray, px: UInt32, width: int, height: int):
    """Origin, unit direction and pixel footprint of pixels px (`raymarch_grad.camera_ray`)."""
    row = px // width
    col = px - row * width
    ro = Array3f(*(float(x) for x in cam[0:3]))
    right, up, fwd = (Array3f(*(float(x) for x in cam[k:k + 3])) for k in (3, 6, 9))
    inv_w = Float(1.0) / Float(width)
    inv_h = Float(1.0) / Float(height)
    u = (Float(col) + 0.5) * inv_w * 2.0 - 1.0
    v = 1.0 - (Float(row) + 0.5) * inv_h * 2.0
    rd = fwd + right * u + up * v
    return ro, rd / dr.norm(rd), Float(float(cam[12]))


def march(ro, rd, pixel, s: Scene):
    """`raymarch.march`: (hit, t, edge0, edge1) per ray, edges as (ratio, bracket lo, bracket hi)."""
    big = Float(1e9)
    zero = dr.zeros(Float, dr.width(rd))
    state = (Int(0), zero, Bool(False), Int(0), Bool(True), big + zero, big + zero, zero, zero,
             Array3f(big, zero, zero), Array3f(big, zero, zero))

    def cond(i, t, hit, refined, going, r1, r2, t1, t2, e0, e1):
        return going & (i < raymarch.MAX_STEPS)

    def body(i, t, hit, refined, going, r1, r2, t1, t2, e0, e1):
        d, _ = scene_sdf(ro + rd * t, s)
        newly = ~hit & (d < raymarch.HIT_EPS * t)
        missing = ~hit & ~newly
        refined = dr.select(hit, refined + 1, dr.select(newly, 1, refined))
        ratio = d / (pixel * t + 1e-6)
        local = missing & (r1 < r2) & (r1 <= ratio) & (r1 < raymarch.EDGE_MAX_PX)
        found = Array3f(r1, t2, t)
        first = local & (r1 < e0.x)
        second = local & ~first & (r1 < e1.x)
        e1 = dr.select(first, e0, dr.select(second, found, e1))
        e0 = dr.select(first, found, e0)
        r2, t2 = dr.select(missing, r1, r2), dr.select(missing, t1, t2)
        r1, t1 = dr.select(missing, ratio, r1), dr.select(missing, t, t1)
        hit = hit | newly
        t = t + d
        beyond = (t > raymarch.T_MAX) | ((rd.y > 0.0) & (ro.y + rd.y * t > raymarch.SCENE_TOP))
        going = (refined != raymarch.REFINE_STEPS) & ~(~hit & beyond)
        return i + 1, t, hit, refined, going, r1, r2, t1, t2, e0, e1

    i, t, hit, refined, going, r1, r2, t1, t2, e0, e1 = dr.while_loop(state, cond, body)
    return hit, t, e0, e1


def closeness(ro, rd, t, a, b, s: Scene):
    d, m = scene_sdf(ro + rd * t, s)
    return dr.select(m == M_BOUND, raymarch_grad.FAR_RATIO, d / (a * t + b))


def golden_closest(ro, rd, a, b, lo, hi, s: Scene):
    """`raymarch_grad.golden_closest`: t in [lo, hi] minimising closeness (16 golden-section steps)."""
    g = raymarch_grad.GOLDEN
    x1 = hi - g * (hi - lo)
    x2 = lo + g * (hi - lo)
    f1 = closeness(ro, rd, x1, a, b, s)
    f2 = closeness(ro, rd, x2, a, b, s)

    def body(k, lo, hi, x1, x2, f1, f2):
        left = f1 < f2
        hi_l, x2_l, f2_l = x2, x1, f1
        lo_r, x1_r, f1_r = x1, x2, f2
        hi = dr.select(left, hi_l, hi)
        lo = dr.select(left, lo, lo_r)
        x2 = dr.select(left, x2_l, x2)
        f2 = dr.select(left, f2_l, f2)
        x1 = dr.select(left, x1, x1_r)
        f1 = dr.select(left, f1, f1_r)
        x = dr.select(left, hi - g * (hi - lo), lo + g * (hi - lo))
        fx = closeness(ro, rd, x, a, b, s)
        x1, f1 = dr.select(left, x, x1), dr.select(left, fx, f1)
        x2, f2 = dr.select(left, x2, x), dr.select(left, f2, fx)
        return k + 1, lo, hi, x1, x2, f1, f2

    _, lo, hi, x1, x2, f1, f2 = dr.while_loop((Int(0), lo, hi, x1, x2, f1, f2),
                                              lambda k, *rest: k < raymarch_grad.GOLDEN_STEPS, body)
    return dr.select(f1 < f2, x1, x2)


def shadow_closest(ro, rd, on, s: Scene):
    """`raymarch_grad.shadow_closest`: the shadow ray's closest approach t (0: unoccluded); lanes with ~on skip."""
    zero = dr.zeros(Float, dr.width(ro))
    t0 = zero + raymarch_grad.SHADOW_START
    state = (Int(0), Bool(on), t0, zero + raymarch_grad.FAR_RATIO, zero, zero, t0, Bool(False))

    def cond(i, going, t, best, lo, hi, prev_t, pending):
        return going & (i < raymarch.SHADOW_STEPS)

    def body(i, going, t, best, lo, hi, prev_t, pending):
        d, m = scene_sdf(ro + rd * t, s)
        hi = dr.select(pending, t, hi)
        better = (m != M_BOUND) & (d / t < best)
        best = dr.select(better, d / t, best)
        lo = dr.select(better, prev_t, lo)
        pending = better
        prev_t = t
        t = t + dr.clip(d, 0.01, 0.5)
        going = ~((raymarch_grad.PENUMBRA * best < 0.001) | (t > 8.0) | (ro.y + rd.y * t > raymarch.SCENE_TOP))
        return i + 1, going, t, best, lo, hi, prev_t, pending

    _, _, t, best, lo, hi, _, pending = dr.while_loop(state, cond, body)
    hi = dr.select(pending, t, hi)
    refine = on & (raymarch_grad.PENUMBRA * best < raymarch_grad.REFINE_MARGIN)
    out = dr.zeros(Float, dr.width(refine))
    ids = dr.compress(refine)  # refine the near misses only (the Taichi kernel branches per ray)
    if dr.width(ids):
        out_ids = golden_closest(dr.gather(Array3f, ro, ids), dr.gather(Array3f, rd, ids) if dr.width(rd) > 1 else rd,
                                 Float(1.0), Float(0.0), dr.gather(Float, lo, ids), dr.gather(Float, hi, ids), s)
        dr.scatter(out, out_ids, ids)
    return out


def normal_at(p, s: Scene):
    n = Array3f(0.0)
    for k in range(4):
        n += tap_sign(k) * scene_sdf(p + tap_sign(k) * raymarch.NORMAL_EPS, s)[0]
    return n / dr.norm(n)


def ambient_occlusion(p, n, s: Scene):
    occ = Float(0.0)
    weight = Float(1.0)
    for i in range(5):
        h = Float(0.012) + Float(0.04) * Float(i)
        occ += dr.maximum(h - scene_sdf(p + n * h, s)[0], 0.0) * weight
        weight *= 0.8
    return dr.clip(1.0 - 2.5 * occ, 0.0, 1.0)


class Held:
    """What the detached hold keeps per *active* slot (compacted: `ids` are their slot numbers,
    slot = layer * n_px + px as in the Taichi renderer; `pos` maps a slot to its place in the compaction)."""

    def __init__(self, **values):
        self.__dict__.update(values)


def _stack(points: list) -> Array3f:
    """Sample arrays [p_0 .. p_k] (each n long) as one array of k n points (sample-major)."""
    n = dr.width(points[0])
    idx = dr.arange(UInt32, len(points) * n)
    j = idx // n
    out = Array3f(0.0)
    for k, p in enumerate(points):
        out = dr.select(j == k, dr.gather(Array3f, p, idx - k * n, j == k), out)
    return out


def _unstack(stacked, count: int = raymarch_grad.N_SAMPLES) -> list:
    n = dr.width(stacked) // count
    return [dr.gather(type(stacked), stacked, dr.arange(UInt32, n) + k * n) for k in range(count)]


class DrJitRenderer:
    """The port: `set_view`, `set_target`, `render(theta)`, `loss_and_gradient(theta)` like `DiffRenderer`.

    theta: numpy (N_THETA,) float; images (height, width, 3) float32; gradients float64 copies.
    Work runs on compacted active slots (`dr.compress`), as the Taichi kernels skip inactive ones."""

    def __init__(self, edge_px: float = 1.0, kappa: float = 8.0):
        self.edge_px, self.kappa = float(edge_px), float(kappa)
        self.target = None

    def set_view(self, cam: np.ndarray, width: int, height: int) -> None:
        """cam: the 13 camera values of `engine.render.camera_params` (float32, as the Taichi renderer holds them)."""
        self.cam = np.asarray(cam, np.float32)
        self.width, self.height = int(width), int(height)
        self.target = None

    def set_target(self, image: np.ndarray, weight: np.ndarray | None = None) -> None:
        """Target image (height, width, 3); `weight` (height, width) scales each pixel's loss term (default 1)."""
        flat = np.asarray(image, np.float32).reshape(-1, 3)
        self.target = Array3f(*(Float(np.ascontiguousarray(flat[:, k])) for k in range(3)))
        self.weight = Float(1.0) if weight is None else Float(np.asarray(weight, np.float32).reshape(-1))

    def hold(self, s: Scene) -> Held:
        """Detached: march, edge layers, per-slot points, materials, occlusion, shadow points, spatial gradients."""
        n_px = self.width * self.height
        ro, rd, pixel = camera_ray(self.cam, dr.arange(UInt32, n_px), self.width, self.height)
        hit, t_hit, e0, e1 = march(ro, rd, pixel, s)
        # edge layers: slots n_px .. 3 n_px - 1; refine only those within reach
        cand = dr.arange(UInt32, (raymarch_grad.N_LAYERS - 1) * n_px)
        cpx = cand % n_px
        edge = dr.select(cand < n_px, dr.gather(Array3f, e0, cpx), dr.gather(Array3f, e1, cpx))
        on_edge = edge.x < self.edge_px * raymarch_grad.REFINE_MARGIN
        active = dr.zeros(Bool, raymarch_grad.N_LAYERS * n_px)
        dr.scatter(active, hit, dr.arange(UInt32, n_px))
        dr.scatter(active, on_edge, cand + n_px)
        t_all = dr.gather(Float, t_hit, dr.arange(UInt32, raymarch_grad.N_LAYERS * n_px) % n_px)
        e_ids = dr.compress(on_edge)
        if dr.width(e_ids):
            e_px = e_ids % n_px
            ero, erd, epixel = camera_ray(self.cam, e_px, self.width, self.height)
            e = dr.gather(Array3f, edge, e_ids)
            dr.scatter(t_all, golden_closest(ero, erd, epixel, Float(1e-6), e.y, e.z, s), e_ids + n_px)
        ids = dr.compress(active)
        pos = dr.zeros(UInt32, raymarch_grad.N_LAYERS * n_px)
        dr.scatter(pos, dr.arange(UInt32, dr.width(ids)), ids)
        layer = ids // n_px
        ro, rd, pixel = camera_ray(self.cam, ids - layer * n_px, self.width, self.height)
        t = dr.gather(Float, t_all, ids)
        p = ro + rd * t
        n = normal_at(p, s)
        mat = Int(scene_sdf(p, s)[1])
        ao = ambient_occlusion(p, n, s)
        lit = dr.dot(n, s.sun) > 0.0
        origin = p + n * raymarch_grad.SHADOW_OFFSET
        sh = shadow_closest(origin, s.sun, lit, s)
        q = dr.select(lit, origin + s.sun * sh, p)
        sh = dr.select(lit & (sh > 0.0) & (scene_sdf(q, s)[1] == M_BOUND), -1.0, sh)
        points = [p] + [p + tap_sign(k) * raymarch.NORMAL_EPS for k in range(4)] + [q]
        dr.eval(t, mat, ao, sh, points)
        # the spatial gradient at all six samples of every slot: one SDF evaluation, reverse mode in the points
        stacked = _stack(points)
        dr.enable_grad(stacked)
        d, _ = scene_sdf(stacked, s)
        dr.backward_from(d)
        grads = dr.grad(stacked)
        stacked = dr.detach(stacked)
        dr.eval(grads, stacked)
        return Held(active=active, ids=ids, pos=pos, t=t, mat=mat, ao=ao, shadow=sh, points=points,
                    stacked=stacked, grads=_unstack(grads), rd=rd, pixel=pixel, layer=layer)

    def image_of(self, theta: Float):
        """The image (Array3f over pixels) as a function of theta (AD-tracked when theta is)."""
        n_px = self.width * self.height
        h = self.hold(scene_of(dr.detach(theta)))
        s = scene_of(theta)
        samples = _unstack(scene_sdf(h.stacked, s)[0])
        g = h.grads
        f0 = samples[raymarch_grad.S_POINT]
        gd = dr.minimum(dr.dot(g[raymarch_grad.S_POINT], h.rd), -raymarch_grad.MIN_GRAZING)
        delta = dr.select(h.layer == 0, -f0 / gd, 0.0)
        ratio = f0 / (h.pixel * h.t + 1e-6)
        t = h.t + delta
        p = h.points[raymarch_grad.S_POINT] + h.rd * delta
        n = Array3f(0.0)
        for k in range(4):
            n += tap_sign(k) * (samples[raymarch_grad.S_TAP0 + k] + dr.dot(g[raymarch_grad.S_TAP0 + k], h.rd) * delta)
        n = n / length(n)
        shadowed = h.shadow > 0.0
        s_t = dr.select(shadowed, h.shadow, 1.0)
        moved = p + n * raymarch_grad.SHADOW_OFFSET + s.sun * s_t - h.points[raymarch_grad.S_SHADOW]
        occluder = samples[raymarch_grad.S_SHADOW] + dr.dot(g[raymarch_grad.S_SHADOW], moved)
        shadow = dr.select(shadowed, penumbra(occluder / s_t), 1.0)
        colour = fog(light(p, h.rd, t, n, h.mat, shadow, h.ao, s), h.rd, t)
        # soft minimum over the edge layers (softmin.soft_min_layers), then compose (raymarch_grad.compose)
        px = dr.arange(UInt32, n_px)
        on = [dr.gather(Bool, h.active, px + k * n_px) for k in range(raymarch_grad.N_LAYERS)]
        at = [dr.gather(UInt32, h.pos, px + k * n_px) for k in range(raymarch_grad.N_LAYERS)]
        r = [dr.select(on[k], dr.gather(Float, ratio, at[k], on[k]), INACTIVE_RATIO)
             for k in range(1, raymarch_grad.N_LAYERS)]
        m = r[0]
        for r_k in r[1:]:
            m = dr.minimum(m, r_k)
        m = dr.detach(m)  # its derivative cancels exactly (the weights sum to 1)
        kappa = Float(self.kappa)
        e = [dr.exp(-kappa * (r_k - m)) for r_k in r]
        z = e[0]
        for e_k in e[1:]:
            z = z + e_k
        soft_ratio = m - dr.log(z) / kappa
        soft_colour = Array3f(0.0)
        for k, e_k in enumerate(e, start=1):
            soft_colour += dr.select(on[k], e_k / z, 0.0) * dr.gather(Array3f, colour, at[k], on[k])
        _, rd, _ = camera_ray(self.cam, px, self.width, self.height)
        base = dr.select(on[0], dr.gather(Array3f, colour, at[0], on[0]), sky(rd))
        cover = 1.0 - smoothstep(0.0, 1.0, soft_ratio / self.edge_px)
        return tone_map(lerp(base, soft_colour, cover))

    def render(self, theta: np.ndarray) -> np.ndarray:
        image = self.image_of(Float(np.asarray(theta, np.float32)))
        return self._numpy(image)

    def _numpy(self, image: Array3f) -> np.ndarray:
        return np.stack([image.x.numpy(), image.y.numpy(), image.z.numpy()], -1).reshape(self.height, self.width, 3)

    def loss_and_gradient(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """L2 loss 0.5 w |image - target|^2 / (3 pixels) and its gradient in theta (float64 copy)."""
        th = Float(np.asarray(theta, np.float32))
        dr.enable_grad(th)
        image = self.image_of(th)
        d = image - self.target
        loss = dr.sum(0.5 * self.weight * dr.dot(d, d)) * (1.0 / (3.0 * self.width * self.height))
        dr.backward_from(loss)
        grad = dr.grad(th).numpy().astype(np.float64)
        self.last_image = image
        return float(loss.numpy()[0]), grad


def thread_count() -> int:
    return dr.thread_count()


def set_thread_count(n: int) -> None:
    dr.set_thread_count(int(n))

