"""Warp's side of the ray-march benchmark: a line-by-line port of engine/kernels/raymarch.py.

Same parameter array, same SDFs, same march, shadows, occlusion, shading and tone
curve, same float32 constants; `bench/raymarch.py` checks that it renders the same
image (within the parity tolerance) before timing it. Imported only when warp-lang is
installed: Warp is a benchmark peer, never a runtime dependency.
"""
from __future__ import annotations

import numpy as np
import warp as wp

from engine.kernels import raymarch

wp.config.quiet = True

# constants shared with the Taichi kernel (Python values, baked into both)
P_BASE, P_SHOULDER, P_ELBOW, P_WRIST = raymarch.P_BASE, raymarch.P_SHOULDER, raymarch.P_ELBOW, raymarch.P_WRIST
THX, THY, THZ = (float(v) for v in raymarch.TILE_HALF)
TR = float(raymarch.TILE_ROUND)
S_R = float(raymarch._S_R)
SC0, SC1 = (float(v) for v in raymarch._S_SC)
TOP_C, TOP_S = (float(v) for v in raymarch._S_TOP_ROT)
BOT_C, BOT_S = (float(v) for v in raymarch._S_BOT_ROT)
STROKE = float(raymarch.STROKE)
LETTER_HALF_DEPTH = float(raymarch.LETTER_HALF_DEPTH)
BM = float(raymarch.BOUND_MARGIN)
NEAR_TABLE_X, NEAR_TABLE_Y, NEAR_TABLE_Z = (float(v) for v in raymarch.NEAR_TABLE)
NEAR_MOVING = float(raymarch.NEAR_MOVING)
NEAR_BASE_R, NEAR_BASE_Y = (float(v) for v in raymarch.NEAR_BASE)
NEAR_LINKS_D, NEAR_LINKS_LAT = (float(v) for v in raymarch.NEAR_LINKS)
M_SKY, M_FLOOR, M_TABLE, M_TILE, M_LETTER = (float(v) for v in (raymarch.M_SKY, raymarch.M_FLOOR, raymarch.M_TABLE,
                                                                   raymarch.M_TILE, raymarch.M_LETTER))
M_PAINT, M_JOINT, M_STEEL, M_PEDESTAL, M_BOUND = (float(v) for v in (raymarch.M_PAINT, raymarch.M_JOINT,
                                                                     raymarch.M_STEEL, raymarch.M_PEDESTAL,
                                                                     raymarch.M_BOUND))
KEY = wp.constant(wp.vec3(*raymarch.KEY_DIR))
KEY_COL = wp.constant(wp.vec3(*raymarch.KEY_COL))
ZENITH = wp.constant(wp.vec3(*raymarch.SKY_ZENITH))
HORIZON = wp.constant(wp.vec3(*raymarch.SKY_HORIZON))
FLOOR_BASE = wp.constant(wp.vec3(*raymarch.FLOOR_BASE))
FLOOR_LINE = wp.constant(wp.vec3(*raymarch.FLOOR_LINE))
G0, G1, G2, G3, G4, G5, G6 = (int(g) for g in raymarch.SLOT_GLYPHS)
G_MOVING = int(raymarch.SLOT_GLYPHS[raymarch.MOVING_SLOT])


@wp.struct
class Scene:
    base: wp.vec4
    shoulder: wp.vec2
    elbow: wp.vec2
    wrist: wp.vec2
    tool: wp.vec2
    grip: float
    tile_pos: wp.vec3
    tile_rot: wp.mat33


@wp.func
def vmax2(v: wp.vec2, s: float):
    return wp.vec2(wp.max(v[0], s), wp.max(v[1], s))


@wp.func
def vmax3(v: wp.vec3, s: float):
    return wp.vec3(wp.max(v[0], s), wp.max(v[1], s), wp.max(v[2], s))


@wp.func
def smoothstep(e0: float, e1: float, x: float):
    t = wp.clamp((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


@wp.func
def sd_box(p: wp.vec3, half: wp.vec3):
    q = wp.vec3(wp.abs(p[0]), wp.abs(p[1]), wp.abs(p[2])) - half
    return wp.length(vmax3(q, 0.0)) + wp.min(wp.max(q[0], wp.max(q[1], q[2])), 0.0)


@wp.func
def sd_segment2(p: wp.vec2, a: wp.vec2, b: wp.vec2):
    pa = p - a
    ba = b - a
    h = wp.clamp(wp.dot(pa, ba) / wp.dot(ba, ba), 0.0, 1.0)
    return wp.length(pa - ba * h)


@wp.func
def extrude(d2: float, z: float, half: float):
    w = wp.vec2(d2, wp.abs(z) - half)
    return wp.min(wp.max(w[0], w[1]), 0.0) + wp.length(vmax2(w, 0.0))


@wp.func
def sd_arc(p: wp.vec2, ra: float):
    q = wp.vec2(wp.abs(p[0]), p[1])
    d = wp.abs(wp.length(q) - ra)
    if SC1 * q[0] > SC0 * q[1]:
        d = wp.length(q - wp.vec2(SC0 * ra, SC1 * ra))
    return d


@wp.func
def rot2(p: wp.vec2, c: float, s: float):
    return wp.vec2(c * p[0] - s * p[1], s * p[0] + c * p[1])


@wp.func
def glyph(g: int, p: wp.vec2):
    d = float(0.0)
    if g == 0:
        top = rot2(p - wp.vec2(0.0, S_R), TOP_C, TOP_S)
        bot = rot2(p + wp.vec2(0.0, S_R), BOT_C, BOT_S)
        d = wp.min(sd_arc(top, S_R), sd_arc(bot, S_R))
    elif g == 1:
        q = wp.vec2(wp.abs(p[0]), p[1])
        d = wp.min(sd_segment2(q, wp.vec2(0.1, -0.155), wp.vec2(0.1, 0.155)),
                   sd_segment2(p, wp.vec2(-0.1, 0.0), wp.vec2(0.1, 0.0)))
    elif g == 2:
        q = wp.vec2(wp.abs(p[0]), p[1])
        d = wp.min(sd_segment2(q, wp.vec2(0.0, 0.155), wp.vec2(0.115, -0.155)),
                   sd_segment2(p, wp.vec2(-0.062, -0.04), wp.vec2(0.062, -0.04)))
    elif g == 3:
        q = wp.vec2(wp.abs(p[0]), p[1])
        d = wp.min(sd_segment2(q, wp.vec2(0.1, -0.155), wp.vec2(0.1, 0.155)),
                   sd_segment2(p, wp.vec2(-0.1, 0.155), wp.vec2(0.1, -0.155)))
    else:
        d = wp.abs(sd_segment2(p, wp.vec2(0.0, -0.065), wp.vec2(0.0, 0.065)) - 0.095)
    return d


@wp.func
def sd_tile(u: wp.vec3, g: int):
    slab = sd_box(u, wp.vec3(THX - TR, THY - TR, THZ - TR)) - TR
    letter = extrude(glyph(g, wp.vec2(u[0], u[1])) - (STROKE - 0.008), u[2] - LETTER_HALF_DEPTH, LETTER_HALF_DEPTH) - 0.008
    res = wp.vec2(slab, M_TILE)
    if letter < slab:
        res = wp.vec2(letter, M_LETTER)
    return res


@wp.func
def closer(a: wp.vec2, b: wp.vec2):
    res = a
    if b[0] < a[0]:
        res = b
    return res


@wp.func
def sd_table(p: wp.vec3):
    res = wp.vec2(wp.max(p[1] - float(raymarch.TABLE_TOP), wp.max(wp.abs(p[0]) - 1.95, wp.abs(p[2]) - 0.6)), M_BOUND)
    if p[1] < NEAR_TABLE_Y and wp.abs(p[0]) < NEAR_TABLE_X and wp.abs(p[2]) < NEAR_TABLE_Z:
        top = sd_box(p - wp.vec3(0.0, float(raymarch.TABLE_TOP) - 0.025, 0.0), wp.vec3(1.94, 0.015, 0.59)) - 0.01
        leg = sd_box(wp.vec3(wp.abs(p[0]) - 1.8, p[1] - 0.375, wp.abs(p[2]) - 0.48),
                     wp.vec3(0.035, 0.375, 0.035)) - 0.008
        res = wp.vec2(wp.min(top, leg), M_TABLE)
    return res


@wp.func
def slot_glyph(i: int):
    g = int(0)
    if i == 0:
        g = G0
    elif i == 1:
        g = G1
    elif i == 2:
        g = G2
    elif i == 3:
        g = G3
    elif i == 4:
        g = G4
    elif i == 5:
        g = G5
    elif i == 6:
        g = G6
    return g


@wp.func
def sd_tiles(p: wp.vec3, s: Scene):
    row_bound = sd_box(p - wp.vec3(0.0, float(raymarch.TILE_Y), float(raymarch.ROW_Z)), wp.vec3(1.72, 0.25, 0.06))
    rel = p - s.tile_pos
    moving_dist = wp.length(rel)
    moving_bound = moving_dist - 0.32
    near_row = row_bound < BM
    near_moving = moving_dist < NEAR_MOVING
    res = wp.vec2(wp.min(row_bound, moving_bound), M_BOUND)
    if near_row or near_moving:
        res = wp.vec2(1.0e9, M_BOUND)
        if not near_row:
            res = wp.vec2(row_bound, M_BOUND)
        if not near_moving:
            res = closer(res, wp.vec2(moving_bound, M_BOUND))
        i0 = int(wp.floor((p[0] - float(raymarch.SLOT_X0)) / float(raymarch.SLOT_SPACING)))
        for k in range(3):
            i = i0 + k
            u = p - wp.vec3(float(raymarch.SLOT_X0) + float(raymarch.SLOT_SPACING) * float(i), float(raymarch.TILE_Y),
                            float(raymarch.ROW_Z))
            g = slot_glyph(i)
            usable = near_row and i >= 0 and i < raymarch.N_SLOTS and i != raymarch.MOVING_SLOT and k < 2
            if k == 2:
                u = s.tile_rot * rel
                g = G_MOVING
                usable = near_moving
            if usable:
                res = closer(res, sd_tile(u, g))
    return res


@wp.func
def sd_arm(p: wp.vec3, s: Scene):
    dx = p[0] - s.base[0]
    dz = p[2] - s.base[1]
    radial = wp.length(wp.vec2(dx, dz))
    fwd = dx * s.base[3] + dz * s.base[2]
    lat = dx * s.base[2] - dz * s.base[3]
    res = wp.vec2(extrude(radial - 0.42, p[1] - 0.52, 0.52), M_BOUND)
    if radial < NEAR_BASE_R and p[1] < NEAR_BASE_Y:
        pedestal = extrude(radial - 0.25, p[1] - 0.3, 0.3) - 0.02
        plate = extrude(radial - 0.4, p[1] - 0.02, 0.02)
        res = wp.vec2(wp.min(pedestal, plate), M_PEDESTAL)
        turret = extrude(radial - 0.2, p[1] - 0.72, 0.1) - 0.02
        bracket = sd_box(wp.vec3(fwd, p[1] - 0.9, lat), wp.vec3(0.12, 0.08, 0.15)) - 0.03
        res = closer(res, wp.vec2(wp.min(turret, bracket), M_PAINT))
    q = wp.vec2(fwd, p[1])
    tcp = s.wrist + s.tool * float(raymarch.TCP_OFFSET)
    to_links = wp.min(sd_segment2(q, s.shoulder, s.elbow),
                      wp.min(sd_segment2(q, s.elbow, s.wrist), sd_segment2(q, s.wrist, tcp)))
    bound = wp.max(to_links - 0.2, wp.abs(lat) - 0.32)
    if to_links < NEAR_LINKS_D and wp.abs(lat) < NEAR_LINKS_LAT:
        upper = extrude(sd_segment2(q, s.shoulder, s.elbow) - 0.055, lat, 0.06) - 0.03
        fore = extrude(sd_segment2(q, s.elbow, s.wrist) - 0.04, lat, 0.045) - 0.025
        res = closer(res, wp.vec2(wp.min(upper, fore), M_PAINT))
        joints = wp.min(extrude(wp.length(q - s.shoulder) - 0.115, lat, 0.185) - 0.012,
                        wp.min(extrude(wp.length(q - s.elbow) - 0.09, lat, 0.105) - 0.01,
                               extrude(wp.length(q - s.wrist) - 0.06, lat, 0.075) - 0.01))
        res = closer(res, wp.vec2(joints, M_JOINT))
        v = q - s.wrist
        along = v[0] * s.tool[0] + v[1] * s.tool[1]
        across = v[1] * s.tool[0] - v[0] * s.tool[1]
        palm = sd_box(wp.vec3(along - 0.1, across, lat), wp.vec3(0.035, 0.05, 0.27)) - 0.012
        finger = sd_box(wp.vec3(along - 0.215, across, wp.abs(lat) - s.grip), wp.vec3(0.072, 0.042, 0.009)) - 0.004
        res = closer(res, wp.vec2(wp.min(palm, finger), M_STEEL))
    else:
        res = closer(res, wp.vec2(bound, M_BOUND))
    return res


@wp.func
def scene_sdf(p: wp.vec3, s: Scene):
    res = wp.vec2(p[1], M_FLOOR)
    res = closer(res, sd_table(p))
    res = closer(res, sd_tiles(p, s))
    res = closer(res, sd_arm(p, s))
    return res


@wp.func
def normal_at(p: wp.vec3, s: Scene):
    e = 0.0005
    n = wp.vec3(0.0)
    for k in range(4):
        sx = -1.0
        if k == 0 or k == 3:
            sx = 1.0
        sy = -1.0
        if k >= 2:
            sy = 1.0
        sz = -1.0
        if k == 1 or k == 3:
            sz = 1.0
        sign = wp.vec3(sx, sy, sz)
        n = n + sign * scene_sdf(p + sign * e, s)[0]
    return n / wp.length(n)


@wp.func
def soft_shadow(ro: wp.vec3, rd: wp.vec3, s: Scene):
    res = float(1.0)
    t = float(0.015)
    prev_h = float(1.0e10)
    for _ in range(raymarch.SHADOW_STEPS):
        hm = scene_sdf(ro + rd * t, s)
        h = hm[0]
        if hm[1] != M_BOUND:
            y = h * h / (2.0 * prev_h)
            closest = wp.sqrt(wp.max(h * h - y * y, 0.0))
            res = wp.min(res, 10.0 * closest / wp.max(t - y, 1.0e-4))
            prev_h = h
        else:
            prev_h = 1.0e10
        t = t + wp.clamp(h, 0.01, 0.5)
        if res < 0.001 or t > 8.0 or ro[1] + rd[1] * t > float(raymarch.SCENE_TOP):
            break
    res = wp.clamp(res, 0.0, 1.0)
    return res * res * (3.0 - 2.0 * res)


@wp.func
def ambient_occlusion(p: wp.vec3, n: wp.vec3, s: Scene):
    occ = float(0.0)
    weight = float(1.0)
    for i in range(5):
        h = 0.012 + 0.04 * float(i)
        occ = occ + wp.max(h - scene_sdf(p + n * h, s)[0], 0.0) * weight
        weight = weight * 0.8
    return wp.clamp(1.0 - 2.5 * occ, 0.0, 1.0)


@wp.func
def sky(rd: wp.vec3):
    k = wp.clamp(rd[1] * 1.6, 0.0, 1.0)
    k = k * (2.0 - k)
    return HORIZON * (1.0 - k) + ZENITH * k


@wp.func
def grid_line(x: float, width: float):
    f = x * 2.0 - wp.floor(x * 2.0)
    dist = wp.min(f, 1.0 - f) * 0.5
    return 1.0 - smoothstep(0.0, width, dist)


@wp.func
def shade(p: wp.vec3, rd: wp.vec3, t: float, s: Scene):
    n = normal_at(p, s)
    m = int(scene_sdf(p, s)[1])
    albedo = wp.vec3(0.5)
    spec = float(0.04)
    squarings = int(4)
    if m == raymarch.M_FLOOR:
        w = 0.004 + 0.0012 * t
        line = wp.max(grid_line(p[0], w), grid_line(p[2], w)) * 0.8
        albedo = FLOOR_BASE * (1.0 - line) + FLOOR_LINE * line
        spec = 0.02
    elif m == raymarch.M_TABLE:
        albedo = wp.vec3(0.2, 0.11, 0.055)
        spec = 0.06
        squarings = 5
    elif m == raymarch.M_TILE:
        albedo = wp.vec3(0.86, 0.82, 0.72)
        spec = 0.05
    elif m == raymarch.M_LETTER:
        albedo = wp.vec3(0.72, 0.06, 0.05)
        spec = 0.18
        squarings = 6
    elif m == raymarch.M_PAINT:
        albedo = wp.vec3(0.9, 0.28, 0.025)
        spec = 0.25
        squarings = 6
    elif m == raymarch.M_JOINT:
        albedo = wp.vec3(0.07, 0.07, 0.08)
        spec = 0.35
        squarings = 6
    elif m == raymarch.M_STEEL:
        albedo = wp.vec3(0.55, 0.57, 0.6)
        spec = 0.6
        squarings = 7
    elif m == raymarch.M_PEDESTAL:
        albedo = wp.vec3(0.13, 0.13, 0.14)
        spec = 0.15
        squarings = 5
    ndl = wp.max(wp.dot(n, KEY), 0.0)
    shadow = float(0.0)
    if ndl > 0.0:
        shadow = soft_shadow(p + n * 0.002, KEY, s)
    ao = ambient_occlusion(p, n, s)
    half = KEY - rd
    half = half / wp.length(half)
    ndh = wp.max(wp.dot(n, half), 0.0)
    highlight = ndh
    for i in range(squarings):
        highlight = highlight * highlight
    ndv = wp.clamp(-wp.dot(n, rd), 0.0, 1.0)
    f1 = 1.0 - ndv
    f2 = f1 * f1
    x5 = f2 * f2 * f1
    fresnel = spec * (1.0 - x5) + 1.0 * x5
    sky_amount = 0.5 + 0.5 * n[1]
    bounce = wp.clamp(0.5 - 0.5 * n[1], 0.0, 1.0)
    diffuse = KEY_COL * (ndl * shadow) + ZENITH * (1.3 * sky_amount * ao) \
        + wp.vec3(0.35, 0.3, 0.25) * (0.35 * bounce * ao)
    lit = wp.cw_mul(albedo, diffuse) + KEY_COL * (fresnel * highlight * ndl * shadow) \
        + sky(wp.vec3(rd[0], wp.abs(rd[1]), rd[2])) * (0.25 * fresnel * ao)
    return lit


@wp.func
def tone(c: float):
    return wp.clamp((c * (0.9036 * c + 0.018)) / (c * (0.8748 * c + 0.354) + 0.14), 0.0, 1.0)


@wp.func
def fog(colour: wp.vec3, rd: wp.vec3, t: float):
    k = t * 0.045
    f = 1.0 - 1.0 / (1.0 + k * k)
    return colour * (1.0 - f) + sky(rd) * f


@wp.kernel
def render(prm: wp.array(dtype=float), width: int, height: int, rgb: wp.array(dtype=wp.vec3, ndim=2)):
    row, col = wp.tid()
    s = Scene()
    s.base = wp.vec4(prm[P_BASE], prm[P_BASE + 1], prm[P_BASE + 2], prm[P_BASE + 3])
    s.shoulder = wp.vec2(prm[P_SHOULDER], prm[P_SHOULDER + 1])
    s.elbow = wp.vec2(prm[P_ELBOW], prm[P_ELBOW + 1])
    s.wrist = wp.vec2(prm[P_WRIST], prm[P_WRIST + 1])
    s.tool = wp.vec2(prm[raymarch.P_TOOL], prm[raymarch.P_TOOL + 1])
    s.grip = prm[raymarch.P_GRIP]
    s.tile_pos = wp.vec3(prm[raymarch.P_TILE_POS], prm[raymarch.P_TILE_POS + 1], prm[raymarch.P_TILE_POS + 2])
    r0 = raymarch.P_TILE_ROT
    s.tile_rot = wp.mat33(prm[r0], prm[r0 + 1], prm[r0 + 2], prm[r0 + 3], prm[r0 + 4], prm[r0 + 5],
                          prm[r0 + 6], prm[r0 + 7], prm[r0 + 8])
    ro = wp.vec3(prm[0], prm[1], prm[2])
    right = wp.vec3(prm[3], prm[4], prm[5])
    up = wp.vec3(prm[6], prm[7], prm[8])
    fwd = wp.vec3(prm[9], prm[10], prm[11])
    pixel = prm[raymarch.P_PIXEL]
    inv_w = 1.0 / float(width)
    inv_h = 1.0 / float(height)
    u = (float(col) + 0.5) * inv_w * 2.0 - 1.0
    v = 1.0 - (float(row) + 0.5) * inv_h * 2.0
    rd = fwd + right * u + up * v
    rd = rd / wp.length(rd)
    t = float(0.0)
    hit = int(0)
    near_ratio = float(1.0e9)
    near_t = float(0.0)
    refined = int(0)
    for i in range(raymarch.MAX_STEPS):
        res = scene_sdf(ro + rd * t, s)
        if hit == 1:
            refined = refined + 1
        elif res[0] < float(raymarch.HIT_EPS) * t:
            hit = 1
            refined = 1
        else:
            ratio = res[0] / (pixel * t + 1.0e-6)
            if ratio < near_ratio:
                near_ratio = ratio
                near_t = t
        t = t + res[0]
        if refined == raymarch.REFINE_STEPS:
            break
        if hit == 0 and (t > float(raymarch.T_MAX) or (rd[1] > 0.0 and ro[1] + rd[1] * t > float(raymarch.SCENE_TOP))):
            break
    colour = sky(rd)
    cover = float(1.0)
    if hit == 0:
        cover = 1.0 - smoothstep(0.0, 1.0, near_ratio)
        t = near_t
    if cover > 0.0:
        lit = shade(ro + rd * t, rd, t, s)
        colour = colour * (1.0 - cover) + fog(lit, rd, t) * cover
    rgb[row, col] = wp.vec3(tone(colour[0]), tone(colour[1]), tone(colour[2]))


class WarpRenderer:
    """The port on Warp's CPU (or CUDA) device: `render(prm)` -> (H, W, 3) float32."""

    def __init__(self, width: int, height: int, device: str = "cpu") -> None:
        wp.init()
        self.width, self.height, self.device = width, height, device
        self.rgb = wp.zeros((height, width), dtype=wp.vec3, device=device)

    def render(self, prm: np.ndarray) -> None:
        params = wp.array(np.asarray(prm, np.float32), dtype=float, device=self.device)
        wp.launch(render, dim=(self.height, self.width), inputs=[params, self.width, self.height, self.rgb],
                  device=self.device)
        wp.synchronize_device(self.device)

    def image(self) -> np.ndarray:
        return self.rgb.numpy().reshape(self.height, self.width, 3)
