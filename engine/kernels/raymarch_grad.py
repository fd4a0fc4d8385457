"""The differentiable render of the robot-arm scene: march untaped, hold points, differentiate at them.

Taichi's reverse mode cannot go through a march (`while`/`break` are refused; a fixed
`for` with an `if` crashed the cpu backward and gave silently wrong gradients on vulkan,
measured), and a taped kernel with the scene SDF inlined at its six call sites took tens
of minutes to compile its adjoint here. So the image is computed from *held points*,
with every function shared with the forward renderer (`engine.kernels.raymarch`: SDFs,
normals, materials, `light`, sky, fog, tone curve; `engine.kernels.kinematics`: theta ->
Scene), in kernels of which only one evaluates the SDF under the tape:

1. `march_pixels` (untaped) marches each pixel's ray (`raymarch.march`, in packets on the cpu) and says which of
   its *slots* exist: layer 0 of pixel px (pixel slot px) is the ray's hit; layers
   1..N_LAYERS-1 (pixel slots k * n_px + px) are the ray's deepest local closest approaches
   before its hit (or miss): the occluding edges it grazed, against the sky or against a
   surface behind (hit-to-hit silhouettes). `engine.kernels.reduce.compact` lists the
   existing slots in order (`slot_pos`: compact slot -> pixel slot), and everything per slot
   below is stored and computed for those only (most pixel slots are sky or hold no edge).
   `hold` (untaped) holds a point to shade per slot (edge layers refined by golden-section
   search) and N_SAMPLES sample points: the shaded point p0, the four normal taps around it,
   and the shadow ray's closest approach to an occluder q (golden-section refined), plus
   the material, the ambient occlusion, the shadow ray's parameter and the scene distance
   at every sample (evaluated where the hold needs it anyway).
2. `sdf_samples` (launched once per sample index j) evaluates the scene SDF at the held
   points as a function of theta: the one differentiated SDF call site. Its adjoint, run
   untaped with unit seeds, gives both the exact spatial gradient at every held point
   (`hold_gradients`) and each slot's d(sample)/d theta (`keep_jacobian`); on the tape
   the samples are a custom step whose backward contracts those Jacobians with the
   samples' adjoints (`samples_adjoint`): one SDF adjoint per sample and iteration, not two.
3. `shade_slots` (taped, no SDF; into the pixel slots) moves the held points with theta to first order, using
   those held spatial gradients: the hit by one Newton step t' = t - f(p0) / (grad f . d)
   (value t, derivative -(df/dtheta) / (grad f . d): implicit differentiation), the taps
   with it (the surface point slides as the scene moves), the normal from the taps, the
   shadow point q(theta) = p' + 0.002 n + s L; f(q) ~ f(q_held) + grad f . (q - q_held).
   The shadow is the penumbra k f(q) / s at the held closest approach (envelope theorem),
   the edge ratio f(p0) / (pixel footprint) (envelope theorem), then `light` and fog.
4. `engine.kernels.softmin.soft_min_layers` combines the edge layers; `compose` blends
   them over the hit (or the sky) by the soft coverage 1 - smoothstep(r / edge_px) and
   tone-maps.

Held constant (no gradient): each slot's material (a discrete choice) and ambient
occlusion (measured in docs/DESIGN.md). The first-order moves are exact in value to
O(|moves|^2) (the Newton step is ~1e-5 m after the march's refinement) and exact in
derivative at the current theta.

Reading theta per slot: every slot reads its own row of `theta_slots` (a broadcast copy
of theta, `engine.kernels.reduce.broadcast_rows`), so Taichi's generated adjoints add
each slot's parameter gradient into that slot's own row (no atomics shared between
threads), and the broadcast's adjoint sums the rows in a fixed order: the parameter
gradient is bit-identical run to run.

Taichi facts this file is shaped by (1.7.4, measured): a dynamic loop in a differentiated
kernel gives wrong gradients or crashes, so taped kernels use `unrolled` scene functions
and static loops only; a statement before the top-level `for` of a taped kernel is
refused; sizes are runtime arguments and fields are allocated at their maximum size, so
one compile serves every resolution.
"""
import taichi as ti

from engine.compile_effort import quick
from engine.kernels.kinematics import scene_from_theta, theta_of, theta_row
from engine.kernels.lanes import all_lanes, any_lane, lane, like, packet_indices, with_lane
from engine.kernels.raymarch import (MARCH_STATES, M_BOUND, NORMAL_EPS, SCENE_TOP, SHADOW_STEPS, Scene,
                                     ambient_occlusion, camera, fog, lerp, light, load_scene, march, normal_from_taps,
                                     primary_ray, scene_distance, scene_sdf, sky, surface_at, tap_normal, tap_sign,
                                     tone_map)
from engine.scene_layout import N_GEOMETRIC

vec2 = ti.math.vec2
vec3 = ti.math.vec3

N_LAYERS = 3  # slot layers per pixel: the hit, then two edge layers
N_SAMPLES = 6  # held sample points per slot: the shaded point, four normal taps, the shadow point
S_POINT, S_TAP0, S_SHADOW = 0, 1, 5
N_GEO = N_GEOMETRIC  # theta's leading, geometric components (scene_layout.THETA): the only ones the SDF reads
N_CAM = 13  # camera values: position, right, up, forward (3 each, `raymarch.P_CAM_*` layout), pixel size
GOLDEN_STEPS = 16  # golden-section steps refining a closest approach (bracket x 0.618^16 = 4.6e-4)
GOLDEN = 0.6180339887498949
PENUMBRA = 10.0  # soft-shadow sharpness: shadow = smoothstep(clamp(PENUMBRA * distance / t))
SHADOW_START = 0.015  # the shadow ray starts this far from its origin (p + 0.002 n), as in raymarch.soft_shadow
SHADOW_OFFSET = 0.002
MIN_GRAZING = 0.05  # |n . d| of the Newton step is held at least this (grazing hits: dt/dtheta ~ 1 / (n . d))
FAR_RATIO = 1e9  # objective value of a bound's distance (not a surface) in closest-approach searches
# A closest approach is refined (and held) when the best march step comes within this factor of the
# threshold that matters (edge width, full penumbra): the refined minimum lies below the best step, so
# deciding on the step alone would switch an edge or a shadow on abruptly as theta moves.
REFINE_MARGIN = 2.0


@ti.func
def camera_rays(cam: ti.template(), px, width: ti.i32, height: ti.i32):
    """Origin, unit direction (lane components) and pixel footprint (radians) of pixel(s) px (row-major, a lane
    value) of a width x height image. cam: N_CAM values, the camera's axes laid out as `raymarch.P_CAM_*`."""
    row = px // width
    ro, right, up, fwd = camera(cam)
    dx, dy, dz = primary_ray(fwd, right, up, row, px - row * width, 1.0 / ti.cast(width, ti.f32),
                             1.0 / ti.cast(height, ti.f32))
    return ro, dx, dy, dz, cam[12]


@ti.func
def camera_ray(cam: ti.template(), px: ti.i32, width: ti.i32, height: ti.i32):
    """`camera_rays` of one pixel, its direction a vec3."""
    ro, dx, dy, dz, pixel = camera_rays(cam, px, width, height)
    return ro, vec3(dx, dy, dz), pixel


# `closeness`, `golden_closest`, `shadow_closest` and `hold` are lane functions (engine.kernels.lanes): a ray's
# origin and direction are three lane values each (one slot's, or a packet of slots' on the cpu).
@ti.func
def closeness(ox, oy, oz, dx, dy, dz, t, a, b, s: Scene):
    """Distance at o + t d over (a t + b): in pixel footprints for primary rays, the penumbra ratio for shadows."""
    h, m = scene_distance(ox + dx * t, oy + dy * t, oz + dz * t, s, False)
    return ti.select(m == M_BOUND, FAR_RATIO, h / (a * t + b))


@ti.func
def golden_closest(ox, oy, oz, dx, dy, dz, a, b, lo, hi, s: Scene):
    """t in [lo, hi] minimising `closeness` (golden-section search; one SDF call site)."""
    x1 = hi - GOLDEN * (hi - lo)
    x2 = lo + GOLDEN * (hi - lo)
    f1 = like(lo, 0.0)
    f2 = like(lo, 0.0)
    for k in range(GOLDEN_STEPS + 2):
        left = f1 < f2  # the minimum lies in [lo, x2]
        x = x1
        if k == 1:
            x = x2
        elif k >= 2:
            hi, x2, f2, lo, x1, f1 = (ti.select(left, x2, hi), ti.select(left, x1, x2), ti.select(left, f1, f2),
                                      ti.select(left, lo, x1), ti.select(left, x1, x2), ti.select(left, f1, f2))
            x = ti.select(left, hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo))
        fx = closeness(ox, oy, oz, dx, dy, dz, x, a, b, s)
        first = (k == 0) | ((k >= 2) & left)
        x1, f1, x2, f2 = ti.select(first, x, x1), ti.select(first, fx, f1), ti.select(first, x2, x), \
            ti.select(first, f2, fx)
    return ti.select(f1 < f2, x1, x2)


@ti.func
def shadow_closest(ox, oy, oz, s: Scene, active):
    """The shadow ray's (from o towards the key light) closest approach to an occluder: t minimising distance / t,
    or 0 when unoccluded or not `active`.

    Steps as `raymarch.soft_shadow` does (bounds skipped), keeps the best step and its
    neighbours, then refines by golden-section search."""
    sx, sy, sz = s.sun.x, s.sun.y, s.sun.z
    t = like(ox, SHADOW_START)
    best, best_lo, best_hi = like(ox, FAR_RATIO), like(ox, 0.0), like(ox, 0.0)
    prev_t = t
    pending = like(ox, 0)  # the best step's right neighbour is the next step
    done = ti.select(active, 0, 1)
    for _ in range(SHADOW_STEPS):
        h, m = scene_distance(ox + sx * t, oy + sy * t, oz + sz * t, s, False)
        live = done == 0
        best_hi = ti.select(live & (pending != 0), t, best_hi)
        pending = ti.select(live, 0, pending)
        better = live & (m != M_BOUND) & (h / t < best)
        best, best_lo, pending = ti.select(better, h / t, best), ti.select(better, prev_t, best_lo), \
            ti.select(better, 1, pending)
        prev_t = ti.select(live, t, prev_t)
        t = ti.select(live, t + ti.math.clamp(h, 0.01, 0.5), t)
        stop = (PENUMBRA * best < 0.001) | (t > 8.0) | (oy + sy * t > SCENE_TOP)
        done = ti.select(live & stop, 1, done)
        if all_lanes(done != 0):
            break
    best_hi = ti.select(pending != 0, t, best_hi)
    # the refined minimum can be lower than the best step: refine near misses too
    refine = active & (PENUMBRA * best < REFINE_MARGIN)
    out = like(ox, 0.0)
    if any_lane(refine):
        out = ti.select(refine, golden_closest(ox, oy, oz, sx, sy, sz, 1.0, 0.0, best_lo, best_hi, s), out)
    return out


@ti.func
def penumbra(ratio: ti.f32) -> ti.f32:
    res = ti.math.clamp(PENUMBRA * ratio, 0.0, 1.0)
    return res * res * (3.0 - 2.0 * res)


@ti.func
def record_march(m: ti.template(), j: ti.template(), px: ti.i32, n_px: ti.i32, edge_px: ti.f32, active: ti.template(),
                 march_t: ti.template(), march_edges: ti.template()):
    """`march_pixels`' outputs for pixel px, lane j of march m."""
    active[px] = 1 if lane(m.hit, j) != 0 else 0
    march_t[px] = lane(m.t, j)
    for layer in ti.static(range(1, N_LAYERS)):
        ratio, lo, hi = lane(m.edge0_ratio, j), lane(m.edge0_lo, j), lane(m.edge0_hi, j)
        if ti.static(layer == 2):
            ratio, lo, hi = lane(m.edge1_ratio, j), lane(m.edge1_lo, j), lane(m.edge1_hi, j)
        active[layer * n_px + px] = 1 if ratio < edge_px * REFINE_MARGIN else 0  # (see REFINE_MARGIN)
        march_edges[px, layer - 1] = vec2(lo, hi)


@quick("cpu", "vulkan")  # compiles in seconds, not a minute, and runs as fast (engine/compile_effort.py)
@ti.kernel
def march_pixels(scene: ti.template(), cam: ti.template(), width: ti.i32, height: ti.i32, row0: ti.i32, rows: ti.i32,
                 edge_px: ti.f32, active: ti.template(), march_t: ti.template(), march_edges: ti.template(),
                 lanes: ti.template()):
    """Untaped: march every pixel of the band (`rows` rows from row `row0` of the width x height view; band pixel
    px is view pixel px + row0 * width) and say which of its slots exist: active[layer * n_px + px] (layer 0: the
    ray hit; layers 1..: an edge layer within reach, see REFINE_MARGIN), with march_t[px] the hit's t and
    march_edges[px, layer - 1] the edge layer's bracket (lo, hi) for `hold`. scene: the packed Scene
    (`kinematics.kinematics`: the kinematics once, not per pixel). edge_px: the widest edge (in pixel
    footprints) that still gets a layer. `lanes` pixels of a row per thread (`raymarch.render`)."""
    ti.loop_config(block_dim=ti.static(max(64 // lanes, 8)))
    for row, packet in ti.ndrange(rows, (width + lanes - 1) // lanes):
        s = load_scene(scene)
        n_px = width * rows
        ro, dx, dy, dz, pixel = camera_rays(cam, (row0 + row) * width + packet_indices(packet, width, lanes), width,
                                            height)
        m = march(MARCH_STATES[lanes], ro, dx, dy, dz, pixel, s)
        for j in ti.static(range(lanes)):
            col = packet * lanes + j
            if col < width:
                record_march(m, j, row * width + col, n_px, edge_px, active, march_t, march_edges)


@ti.func
def live_slots(slot_count: ti.template(), capacity: ti.template()) -> ti.i32:
    """The slots that exist: the count `reduce.compact` wrote into slot_count (a 0-d int field), at most the
    fields' `capacity` (past it the last edge layers were dropped). Read on the device: the host launches every
    per-slot kernel without waiting to learn it (issue 29: an iteration that never waits)."""
    return ti.min(slot_count[None], capacity)


@quick("cpu", "vulkan")  # compiles in seconds, not a minute, and runs as fast (engine/compile_effort.py)
@ti.kernel
def hold(scene: ti.template(), cam: ti.template(), width: ti.i32, height: ti.i32, row0: ti.i32, rows: ti.i32,
         slot_pos: ti.template(), slot_count: ti.template(), march_t: ti.template(), march_edges: ti.template(),
         held_t: ti.template(), held_mat: ti.template(), held_ao: ti.template(), held_shadow: ti.template(),
         points: ti.template(), values: ti.template(), lanes: ti.template()):
    """Untaped: hold every slot (see the module docstring), with the scene distance at every held point
    (`values`: what `sdf_samples` gives at this theta, evaluated where the hold needs it anyway). Slot c is
    pixel slot slot_pos[c] (layer * n_px + px, `march_pixels`' active ones, in order: `reduce.compact`).
    held_shadow: the shadow ray's parameter s at its closest approach (0: nothing shadows; -1: the sample
    there is a bound, not a surface). `lanes` consecutive slots per thread (`raymarch.render`). The band: as
    `march_pixels`."""
    n_slots = live_slots(slot_count, slot_pos.shape[0])
    ti.loop_config(block_dim=ti.static(max(128 // lanes, 8)))
    for packet in range((n_slots + lanes - 1) // lanes):
        s = load_scene(scene)
        n_px = width * rows
        slot = packet_indices(packet, n_slots, lanes)
        pos = like(slot, 0)
        for j in ti.static(range(lanes)):
            pos = with_lane(pos, j, slot_pos[lane(slot, j)])
        layer = pos // n_px
        px = pos - layer * n_px
        ro, dx, dy, dz, pixel = camera_rays(cam, px + row0 * width, width, height)
        t, lo, hi = like(dx, 0.0), like(dx, 0.0), like(dx, 0.0)
        for j in ti.static(range(lanes)):
            edge = march_edges[lane(px, j), ti.max(lane(layer, j) - 1, 0)]
            t, lo, hi = with_lane(t, j, march_t[lane(px, j)]), with_lane(lo, j, edge.x), with_lane(hi, j, edge.y)
        if any_lane(layer > 0):
            t = ti.select(layer > 0, golden_closest(ro.x, ro.y, ro.z, dx, dy, dz, pixel, 1e-6, lo, hi, s), t)
        px_, py_, pz_ = ro.x + dx * t, ro.y + dy * t, ro.z + dz * t
        t0, t1, t2, t3, h, mat = surface_at(px_, py_, pz_, s)  # the normal's taps, kept as samples too
        for j in ti.static(range(lanes)):
            if packet * lanes + j < n_slots:
                c = lane(slot, j)
                p = vec3(lane(px_, j), lane(py_, j), lane(pz_, j))
                held_t[c] = lane(t, j)
                held_mat[c] = ti.cast(lane(mat, j), ti.i32)
                points[c, S_POINT] = p
                values[c, S_POINT] = lane(h, j)
                for k in ti.static(range(4)):
                    points[c, S_TAP0 + k] = p + tap_sign(k) * NORMAL_EPS
                    values[c, S_TAP0 + k] = lane((t0, t1, t2, t3)[k], j)
        nx, ny, nz = normal_from_taps(t0, t1, t2, t3)
        ao = ambient_occlusion(px_, py_, pz_, nx, ny, nz, s)
        lit = nx * s.sun.x + ny * s.sun.y + nz * s.sun.z > 0.0
        sh, fq = like(h, 0.0), like(h, 0.0)
        qx, qy, qz = px_, py_, pz_
        if any_lane(lit):
            ox, oy, oz = px_ + nx * SHADOW_OFFSET, py_ + ny * SHADOW_OFFSET, pz_ + nz * SHADOW_OFFSET
            sh = shadow_closest(ox, oy, oz, s, lit)
            qx = ti.select(lit, ox + s.sun.x * sh, px_)
            qy = ti.select(lit, oy + s.sun.y * sh, py_)
            qz = ti.select(lit, oz + s.sun.z * sh, pz_)
            shadowed = lit & (sh > 0.0)
            if any_lane(shadowed):
                hq, mq = scene_distance(qx, qy, qz, s, False)
                fq = ti.select(shadowed, hq, 0.0)
                sh = ti.select(shadowed & (mq == M_BOUND), -1.0, sh)
        for j in ti.static(range(lanes)):
            if packet * lanes + j < n_slots:
                c = lane(slot, j)
                held_ao[c] = lane(ao, j)
                held_shadow[c] = lane(sh, j)
                points[c, S_SHADOW] = vec3(lane(qx, j), lane(qy, j), lane(qz, j))
                values[c, S_SHADOW] = ti.select(lane(sh, j) > 0.0, lane(fq, j), 0.0)


@ti.kernel
def sdf_samples(theta_slots: ti.template(), points: ti.template(), held_shadow: ti.template(),
                slot_count: ti.template(), j: ti.i32, values: ti.template()):
    """values[slot, j] += scene distance at held point j of every slot, from its row of theta
    (the shadow point only where something shadows); `theta_slots` may also be one shared (N_THETA,) theta
    (`kinematics.theta_of`).

    The one differentiated SDF call site, launched once per sample index j (values zeroed
    first, so the launches only accumulate); its adjoint is what the tape replays."""
    ti.loop_config(block_dim=64)
    for slot in range(live_slots(slot_count, values.shape[0])):
        if j != S_SHADOW or held_shadow[slot] > 0.0:
            s = scene_from_theta(theta_of(theta_slots, slot))
            values[slot, j] += scene_sdf(points[slot, j], s, True).x


@ti.kernel
def seed_samples(values: ti.template(), slot_count: ti.template()):
    """values.grad = 1 on every sample: the untaped adjoint of sdf_samples then leaves grad f in points.grad."""
    for slot, j in ti.ndrange(live_slots(slot_count, values.shape[0]), values.shape[1]):
        values.grad[slot, j] = 1.0


@ti.kernel
def keep_jacobian(theta_slots: ti.template(), slot_count: ti.template(), j: ti.i32, jacobian: ti.template()):
    """jacobian[slot, j, :] = theta_slots.grad[slot, :N_GEO], then those zeroed, for every slot: after the
    adjoint of sdf_samples' launch j seeded with ones, d(sample j)/d theta, kept for `samples_adjoint` (the SDF
    depends on no component past N_GEO)."""
    for slot in range(live_slots(slot_count, jacobian.shape[0])):
        for c in ti.static(range(N_GEO)):
            jacobian[slot, j, c] = theta_slots.grad[slot, c]
            theta_slots.grad[slot, c] = 0.0


@ti.kernel
def samples_adjoint(values: ti.template(), jacobian: ti.template(), slot_count: ti.template(),
                    theta_slots: ti.template()):
    """The sdf_samples launches' adjoint in theta from the Jacobians the hold kept (`keep_jacobian`):
    theta_slots.grad[slot, c] += sum_j values.grad[slot, j] * jacobian[slot, j, c], each slot into its own row."""
    for slot in range(live_slots(slot_count, jacobian.shape[0])):
        for c in ti.static(range(N_GEO)):
            acc = 0.0
            for j in ti.static(range(N_SAMPLES)):
                acc += values.grad[slot, j] * jacobian[slot, j, c]
            theta_slots.grad[slot, c] = theta_slots.grad[slot, c] + acc


@ti.kernel
def seed_channel(image_grad: ti.template(), n_px: ti.i32, channel: ti.i32):
    """image_grad[px] = the unit vector of `channel` for every px < n_px: a reverse pass seeded so leaves each
    slot's d(its pixel's channel)/d theta in its row of theta_slots.grad (`DiffRenderer.image_jacobian`)."""
    for px in range(n_px):
        image_grad[px] = vec3(ti.select(channel == 0, 1.0, 0.0), ti.select(channel == 1, 1.0, 0.0),
                              ti.select(channel == 2, 1.0, 0.0))


@ti.kernel
def pixel_rows(rows: ti.template(), slot_pos: ti.template(), slot_count: ti.template(), n_px: ti.i32, first: ti.i32,
               channel: ti.i32, jac: ti.types.ndarray(dtype=ti.f64, ndim=3)):
    """jac[first + px, channel, :] (px a pixel of the band, `first` the band's first pixel in the view) = the sum of
    the rows (of theta_slots.grad, after `seed_channel`'s reverse pass) of pixel px's slots, layer after layer:
    d(px's channel)/d theta. A pixel has at most one slot per layer, so each layer's loop writes distinct pixels,
    and the layers run one after another: no atomics, the same sum in the same order every run. Pixels without a
    slot (sky) do not depend on theta: 0."""
    for px, c in ti.ndrange(n_px, jac.shape[2]):
        jac[first + px, channel, c] = 0.0
    for layer in ti.static(range(N_LAYERS)):
        for slot in range(live_slots(slot_count, slot_pos.shape[0])):
            pos = slot_pos[slot]
            if pos // n_px == layer:
                for c in range(jac.shape[2]):
                    jac[first + pos - layer * n_px, channel, c] += ti.cast(rows[slot, c], ti.f64)


@ti.kernel
def keep_most(slot_count: ti.template(), first: ti.i32, most: ti.template()):
    """most = slot_count (the first band of an evaluation) or the larger of the two: the most slots of any band."""
    for _ in range(1):
        most[None] = ti.select(first != 0, slot_count[None], ti.max(most[None], slot_count[None]))


@ti.kernel
def place_band(image: ti.template(), first: ti.i32, n_px: ti.i32, frame: ti.template()):
    """frame[first + px] = image[px] for px < n_px: a band's image into the view's."""
    for px in range(n_px):
        frame[first + px] = image[px]


@ti.kernel
def hold_gradients(points: ti.template(), slot_count: ti.template(), held_grad: ti.template()):
    """held_grad = points.grad: the spatial gradient of the SDF at every held point (see seed_samples)."""
    for slot, j in ti.ndrange(live_slots(slot_count, points.shape[0]), points.shape[1]):
        held_grad[slot, j] = points.grad[slot, j]


@ti.kernel
def shade_slots(theta_slots: ti.template(), cam: ti.template(), width: ti.i32, height: ti.i32, row0: ti.i32,
                rows: ti.i32, slot_pos: ti.template(), slot_count: ti.template(), held_t: ti.template(),
                held_mat: ti.template(), held_ao: ti.template(), held_shadow: ti.template(), points: ti.template(),
                held_grad: ti.template(), values: ti.template(), colour: ti.template(), ratio: ti.template()):
    """Taped: colour (lit, fogged) and edge ratio of every slot, from its samples (module docstring, 3.), into
    its pixel slot slot_pos[slot] of colour and ratio. The band: as `march_pixels`."""
    ti.loop_config(block_dim=64)
    for slot in range(live_slots(slot_count, slot_pos.shape[0])):
        n_px = width * rows
        pos = slot_pos[slot]
        layer = pos // n_px
        s = scene_from_theta(theta_row(theta_slots, slot))
        ro, rd, pixel = camera_ray(cam, pos - layer * n_px + row0 * width, width, height)
        t0 = held_t[slot]
        f0 = values[slot, S_POINT]
        g = ti.min(held_grad[slot, S_POINT].dot(rd), -MIN_GRAZING)
        delta = ti.select(layer == 0, -f0 / g, 0.0)  # hits: one Newton step along the ray; edges: held
        ratio[pos] = f0 / (pixel * t0 + 1e-6)
        t = t0 + delta
        p = points[slot, S_POINT] + rd * delta
        taps = ti.math.vec4(0.0)
        for k in ti.static(range(4)):  # the taps slide with the surface point
            taps[k] = values[slot, S_TAP0 + k] + held_grad[slot, S_TAP0 + k].dot(rd) * delta
        n = tap_normal(taps)
        shadow = 1.0
        s_t = held_shadow[slot]
        if s_t > 0.0:
            moved = p + n * SHADOW_OFFSET + s.sun * s_t - points[slot, S_SHADOW]
            occluder = values[slot, S_SHADOW] + held_grad[slot, S_SHADOW].dot(moved)
            shadow = penumbra(occluder / s_t)
        c = light(p, rd, t, n, held_mat[slot], shadow, held_ao[slot], s)
        colour[pos] = fog(c, rd, t)


@ti.kernel
def compose(colour: ti.template(), active: ti.template(), soft_ratio: ti.template(), soft_colour: ti.template(),
            cam: ti.template(), width: ti.i32, height: ti.i32, row0: ti.i32, rows: ti.i32, edge_px: ti.f32,
            image: ti.template()):
    """Taped: image[px] = tone_map(hit colour or sky, with the edge colour blended over by its soft coverage), for
    every pixel of the band (as `march_pixels`)."""
    for px in range(width * rows):
        ro, rd, pixel = camera_ray(cam, px + row0 * width, width, height)
        base = sky(rd)
        if active[px] != 0:
            base = colour[px]
        cover = 1.0 - ti.math.smoothstep(0.0, 1.0, soft_ratio[px] / edge_px)
        image[px] = tone_map(lerp(base, soft_colour[px], cover))
