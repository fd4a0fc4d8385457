"""The differentiable render of the robot-arm scene: image(theta), an image loss, d loss / d theta.

    from engine.diff_render import DiffRenderer
    from engine.render import Camera
    from app.scenes.robot_arm import theta_at

    r = DiffRenderer(max_width=256, max_height=128)       # fields at the largest size it will render
    r.set_view(Camera(), 256, 128)                         # any size up to the maximum: no recompile
    r.set_theta(theta_at(0.5))
    target = r.render()                                    # (128, 256, 3) float32, linear, tone-mapped
    r.set_target(target)
    r.set_theta(start)
    loss, grad = r.loss_and_gradient()                     # float, (N_THETA,) float64 d loss / d theta

Kernels: `engine.kernels.raymarch_grad` (hold, sdf_samples, shade_slots, compose; its
docstring explains the method), `.kinematics`, `.softmin`, `.image_loss`, `.reduce`.
One evaluation on the tape:

1. custom step "render: march (untaped)": the kinematics once (`kinematics`), `march_pixels`, and
   `reduce.compact`: the slots that exist (hits, edge layers within reach), listed in order;
   only those are stored and computed from here on (`slot_capacity` of room);
2. `broadcast_rows` theta -> one row per slot (declared adjoint: fixed-order row sums); custom
   step "render: hold (untaped)": `hold` (which also evaluates the SDF at the held points), and
   the samples' adjoint with unit seeds (Taichi's `sdf_samples.grad` at those rows): the spatial
   gradients at the held points and each slot's d(sample)/d theta (`keep_jacobian`); no adjoint
   of its own: the march is not differentiated, what it holds is re-evaluated below;
3. custom step "render: SDF at the held points": the values of 2., with `samples_adjoint` (the
   kept Jacobians times the samples' adjoints) as its backward; 4. `shade_slots` (Taichi's
   adjoint: hits by a Newton step, edges and shadows by the envelope theorem);
5. `soft_min_layers` (declared adjoint); 6. `compose`; with `set_compare("forward")` (a PNG the
   forward renderer wrote) then the custom step "render: the forward renderer's image (untaped)"
   (theta's kinematics on the device, `raymarch.render`) and `substitute_image` (declared adjoint:
   the identity onto the differentiable image), so the loss sees the forward renderer's image and
   the gradient is the differentiable render's Jacobian applied to that residual;
7. per pyramid level: `downsample` (levels > 0), `image_loss_terms` (declared adjoint),
   `sum_into` the loss (declared adjoint).

Everything is allocated at `max_width x max_height` once (the per-pixel and per-slot state for a band of rows:
a view of more than BAND_PIXELS pixels runs these steps band after band, `bands()`, the loss and theta's gradient
summed over them), and sizes are runtime arguments: one compile serves every resolution (a taped shading kernel takes about a
minute to compile per backend; Taichi compiles once per set of fields, so keep one
renderer per process: `shared_renderer`). Losses and gradients are bit-identical run to
run on one backend (no float atomics shared between threads anywhere).
"""
from __future__ import annotations

import logging

import numpy as np
import taichi as ti

from engine import backend
from engine.autodiff.grad_kernels import fill_counted_rows
from engine.autodiff.tape import Tape
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.kernels import image_loss, raymarch, raymarch_grad, reduce
from engine.kernels.kinematics import N_THETA, kinematics, pack_forward
from engine.kernels.lanes import lanes_for
from engine.kernels.softmin import soft_min_layers
from engine.kernels.straight_through import substitute_image
from engine.launch import custom, dispatch, launch, recording
from engine.render import Camera, camera_params, check_size

MAX_LEVELS = 4  # pyramid levels allocated (level l is 2^l times coarser)
# Slots allocated (`raymarch_grad.march_pixels` / `reduce.compact`): one per pixel for its hit (at most one), and room
# for edge layers in proportion to the image's width + height, as silhouettes grow: measured over 5 cameras (distance
# 1.2 to 20), t = 0..1 and edge widths 1-8 at 64x32 to 1024x512, at most 21-35 edge slots per pixel of width +
# height, growing slowly with the size (docs/RESULTS.md). A view with more drops the edge layers past the room
# (logged). It was 1.5 slots per pixel: too few at 64x32 (1.95 used), 0.45 per pixel wasted at 1024x512 (1.06).
EDGE_SLOTS_PER_SPAN = 48
# A view of more pixels than BAND_PIXELS renders in bands of rows, one after another, each with the fields of a band
# (memory: the per-slot state of a 1024x512 view was 400 MiB at once; smaller bands also ran 4-6 % faster, their
# state staying in cache; the recovery's 256x128 view stays one band, whose taped render the polish's Jacobian
# reuses: docs/RESULTS.md); a band starts on a multiple of BAND_ALIGN rows so that every pyramid level of the loss
# splits at the bands' edges (level l halves rows l times)
BAND_PIXELS = 256 * 128
BAND_ALIGN = 1 << (MAX_LEVELS - 1)
COMPARE_KINDS = ("diff", "forward")  # which image the loss compares with the target (DiffRenderer.set_compare)
# Per-slot sample fields are laid out sample by sample ((slot, j) indexed, j outermost in memory): each of the six
# `sdf_samples` launches (and `keep_jacobian`'s) then streams through one contiguous block instead of touching every
# cache line of the whole field for 12 of its 72 bytes (measured at 1024x512: docs/RESULTS.md)
SAMPLE_MAJOR = (1, 0)
DEFAULT_KAPPA = 8.0  # soft-minimum sharpness over a pixel's edge layers: ratios within ~1/8 pixel footprint blend


def _no_adjoint() -> None:
    """The march contributes no gradient of its own: shade_slots re-evaluates what it held."""


def _already_evaluated() -> None:
    """The samples' values at this theta are those the hold step computed (same rows, same points)."""


class DiffRenderer:
    """See the module docstring."""

    def __init__(self, max_width: int = 256, max_height: int = 128, lanes: int | None = None,
                 band_pixels: int = BAND_PIXELS):
        """max_width, max_height: the largest view (fields are allocated for it); lanes: pixels and slots per
        thread of the untaped march and hold (None: the backend's packet width, `engine.kernels.lanes.lanes_for`;
        the result is the same bit for bit at any width); band_pixels: a view of more pixels renders in bands of
        rows (`bands`), and the per-pixel and per-slot fields are allocated for a band (`band_rows` rows at the
        maximum width: `self.band_pixels` pixels)."""
        check_size(max_width, max_height)
        self.max_width, self.max_height = int(max_width), int(max_height)
        self.lanes = lanes or lanes_for(backend.arch_in_use())
        rows = band_rows(self.max_width, self.max_height, band_pixels)
        view_px = self.max_width * self.max_height
        max_px = self.band_pixels = self.max_width * rows  # a band's pixels: every per-pixel field below but the view's
        max_slots = slot_capacity(self.max_width, self.max_height, rows)  # compact slots (`_march`)
        self._slots_read: int | None = None  # `n_slots` once read back from the device for this evaluation
        # three groups, each within one Vulkan storage buffer at 512x256 (engine.fields.VULKAN_MAX_BYTES)
        g = FieldGroup()
        self.groups = [g]
        self.theta = g.field(ti.f32, (N_THETA,), needs_grad=True)
        self.theta_fixed = g.field(ti.f32, (N_THETA,))  # the hold's copy: no gradient, so its adjoints skip theta
        self.theta_slots = g.field(ti.f32, (max_slots, N_THETA), needs_grad=True)
        self.theta_partial = g.field(ti.f32, (-(-max_slots // reduce.BLOCK), N_THETA))
        self.cam = g.field(ti.f32, (raymarch_grad.N_CAM,))
        g = FieldGroup()
        self.groups.append(g)
        self.active = g.field(ti.i32, (raymarch_grad.N_LAYERS * max_px,))  # per pixel slot: does that slot exist
        self.march_t = g.field(ti.f32, (max_px,))
        self.march_edges = g.vector(2, ti.f32, (max_px, raymarch_grad.N_LAYERS - 1))
        self.slot_pos = g.field(ti.i32, (max_slots,))  # compact slot -> pixel slot (layer * n_px + px)
        self.slot_count = g.field(ti.i32, ())
        # the slot count of the evaluation on the tape (untaped renders march again and rewrite slot_count): the
        # rows of the per-slot gradients the tape's next zeroing must cover (`_declare_used_rows`)
        self.taped_count = g.field(ti.i32, ())
        self.compact_partial = g.field(ti.i32, (-(-raymarch_grad.N_LAYERS * max_px // reduce.BLOCK),))
        self.held_t = g.field(ti.f32, (max_slots,))
        self.held_mat = g.field(ti.i32, (max_slots,))
        self.held_ao = g.field(ti.f32, (max_slots,))
        self.held_shadow = g.field(ti.f32, (max_slots,))
        self.points = g.vector(3, ti.f32, (max_slots, raymarch_grad.N_SAMPLES), needs_grad=True, order=SAMPLE_MAJOR)
        self.held_grad = g.vector(3, ti.f32, (max_slots, raymarch_grad.N_SAMPLES), order=SAMPLE_MAJOR)
        g = FieldGroup()
        self.groups.append(g)
        self.values = g.field(ti.f32, (max_slots, raymarch_grad.N_SAMPLES), needs_grad=True, order=SAMPLE_MAJOR)
        self.colour = g.vector(3, ti.f32, (raymarch_grad.N_LAYERS * max_px,), needs_grad=True)  # per pixel slot
        self.ratio = g.field(ti.f32, (raymarch_grad.N_LAYERS * max_px,), needs_grad=True)
        self.soft_ratio = g.field(ti.f32, (max_px,), needs_grad=True)
        self.soft_colour = g.vector(3, ti.f32, (max_px,), needs_grad=True)
        self.weight = g.field(ti.f32, (max_px, raymarch_grad.N_LAYERS - 1))
        self.images, self.targets, self.weights, self.terms, self.dloss, self.partials = [], [], [], [], [], []
        for level in range(MAX_LEVELS):
            n = max(max_px >> (2 * level), 1)
            self.images.append(g.vector(3, ti.f32, (n,), needs_grad=True))  # a band's pyramid (the loss's)
            self.targets.append(g.vector(3, ti.f32, (max(view_px >> (2 * level), 1),)))  # the view's
            self.weights.append(g.field(ti.f32, (max(view_px >> (2 * level), 1),)))
            self.terms.append(g.field(ti.f32, (n,), needs_grad=True))
            self.dloss.append(g.vector(3, ti.f32, (n,)))
            self.partials.append(g.field(ti.f64, (-(-n // reduce.BLOCK),)))
        self.loss = g.field(ti.f64, (), needs_grad=True)
        # the forward-image comparison's (set_compare): a group of its own, after the others, so their
        # SNode ids (and so the offline cache of the kernels that use only them) stay as they were
        g = FieldGroup()
        self.groups.append(g)
        self.diff_image = g.vector(3, ti.f32, (max_px,), needs_grad=True)
        # d(sample)/d theta per slot, kept by the hold for the backward (`raymarch_grad.keep_jacobian`); last, for
        # the same reason
        g = FieldGroup()
        self.groups.append(g)
        self.jacobian = g.field(ti.f32, (max_slots, raymarch_grad.N_SAMPLES, raymarch_grad.N_GEO),
                                 order=(*SAMPLE_MAJOR, 2))
        # theta's kinematics, packed (`raymarch.load_scene`), for the hold
        self.scene = g.field(ti.f32, (raymarch.N_PARAMS,))
        # the view's images, band after band: the compared one and the differentiable render's own
        g = FieldGroup()
        self.groups.append(g)
        self.frame = g.vector(3, ti.f32, (view_px,))
        self.diff_frame = g.vector(3, ti.f32, (view_px,))
        self.most_slots = g.field(ti.i32, ())  # the most slots of any band of the evaluation (`read_slots`)
        for g in self.groups:
            g.finalize()
        self.image = self.images[0]
        self.tape = Tape()
        self.width = self.height = 0
        self._band = (0, 0)  # the band being recorded: (first row, rows)
        self.edge_px = 1.0  # soft edges span this many pixel footprints
        self.kappa = DEFAULT_KAPPA
        self.loss_kind = image_loss.L2
        self.levels = 1
        self.has_target = False
        self.compare = "diff"
        self._forward = None  # engine.render.Renderer of the forward image, made on first use
        self._jac = None  # image_jacobian's (n_px, 3, N_THETA) float64 ndarray, made per view size
        self._cam_params = np.zeros(raymarch_grad.N_CAM)
        self._kept: bytes | None = None  # the `_image_key` of the render the tape holds (`render_taped`), if any

    # -- set-up ------------------------------------------------------------------------------
    def set_view(self, camera: Camera, width: int, height: int) -> None:
        """Camera and image size (at most the maximum this renderer was made for)."""
        check_size(width, height)
        if width > self.max_width or height > self.max_height:
            raise UserError(f"{width}x{height} is larger than this renderer's {self.max_width}x{self.max_height}")
        self.width, self.height = int(width), int(height)
        self._cam_params = camera_params(camera, width, height)
        self.cam.from_numpy(self._cam_params.astype(np.float32))
        self.has_target = False
        self.compare = "diff"

    def set_compare(self, kind: str) -> None:
        """Which image the loss compares with the target: "diff", the differentiable render's own (the default,
        and again after every `set_view`), or "forward", the forward renderer's image of the same theta (the
        renderer a PNG of the scene came from: its loss vanishes at the true pose), with the differentiable
        render's Jacobian carrying the gradient (engine.kernels.straight_through). `render()` then returns the
        forward renderer's image."""
        from engine.render import Renderer

        if kind not in COMPARE_KINDS:
            raise UserError(f"compare '{kind}': choose one of {', '.join(COMPARE_KINDS)}")
        if not self.width:
            raise RuntimeError("DiffRenderer: set_view first")
        if kind == "forward":
            if self._forward is None:
                self._forward = Renderer(self.width, self.height)
            self._forward.resize(self.width, self.height)
        self.compare = kind

    def set_theta(self, theta: np.ndarray) -> None:
        theta = np.asarray(theta, np.float64)
        if theta.shape != (N_THETA,) or not np.all(np.isfinite(theta)):
            raise UserError(f"scene parameters must be {N_THETA} finite numbers, got shape {theta.shape}")
        self.theta.from_numpy(theta.astype(np.float32))

    def theta_values(self) -> np.ndarray:
        return self.theta.to_numpy().astype(np.float64)

    def set_loss(self, kind: str = "l2", levels: int = 1, edge_px: float = 1.0, kappa: float = DEFAULT_KAPPA) -> None:
        """Loss kind ("l2" or "l1"), pyramid levels (1 = full resolution only), edge width, soft-min sharpness."""
        if kind not in image_loss.LOSS_KINDS:
            raise UserError(f"loss '{kind}': choose one of {', '.join(image_loss.LOSS_KINDS)}")
        if not 1 <= levels <= MAX_LEVELS:
            raise UserError(f"pyramid levels {levels}: choose 1..{MAX_LEVELS}")
        if not (0.0 < edge_px <= 8.0 and kappa > 0.0):
            raise UserError(f"edge width {edge_px} must be in (0, 8] pixel footprints and kappa positive")
        self.loss_kind, self.levels = image_loss.LOSS_KINDS[kind], int(levels)
        self.edge_px, self.kappa = float(edge_px), kappa

    def set_target(self, image: np.ndarray, weight: np.ndarray | None = None) -> None:
        """The target image: linear RGB (height, width, 3) of the current view's size; `weight` (height,
        width) scales each pixel's loss term (default 1: a region of interest has 1 inside, 0 outside)."""
        image = np.asarray(image, np.float32)
        if image.shape != (self.height, self.width, 3):
            raise UserError(f"target image is {image.shape[1]}x{image.shape[0]} (shape {image.shape}); "
                            f"the view is {self.width}x{self.height} RGB")
        weight = np.ones(image.shape[:2], np.float32) if weight is None else np.asarray(weight, np.float32)
        if weight.shape != image.shape[:2]:
            raise UserError(f"loss weights of shape {weight.shape} for a {self.width}x{self.height} view")
        self.targets[0].from_numpy(_padded(image.reshape(-1, 3), self.targets[0].shape[0]))
        self.weights[0].from_numpy(_padded(weight.reshape(-1), self.weights[0].shape[0]))
        for level in range(1, MAX_LEVELS):
            w, h = self._level_size(level - 1)
            launch(image_loss.downsample, self.targets[level - 1], w, h, self.targets[level])
            launch(image_loss.downsample, self.weights[level - 1], w, h, self.weights[level])
        self.has_target = True

    # -- evaluation --------------------------------------------------------------------------
    @property
    def n_px(self) -> int:
        return self.width * self.height

    def bands(self) -> list[tuple[int, int]]:
        """The current view's bands of rows, top to bottom: (first row, rows); one when the view fits a band's
        `band_pixels` (a narrower view than the maximum fits more rows), else as many whole multiples of
        BAND_ALIGN rows as fit."""
        rows = self.band_pixels // max(self.width, 1)
        if rows < self.height:
            rows = max(BAND_ALIGN, rows // BAND_ALIGN * BAND_ALIGN)
        return [(row0, min(rows, self.height - row0)) for row0 in range(0, self.height, rows)]

    def _level_size(self, level: int) -> tuple[int, int]:
        return max(self.width >> level, 1), max(self.height >> level, 1)

    def _band_level(self, level: int, row0: int, rows: int) -> tuple[int, int]:
        """Pyramid level `level`'s rows of band (row0, rows): its first row there and its rows (bands start on a
        multiple of BAND_ALIGN rows, so each level's rows split exactly at the bands' edges)."""
        if rows == self.height:
            return 0, self._level_size(level)[1]
        return row0 >> level, ((row0 + rows) >> level) - (row0 >> level)

    def record(self, row0: int = 0, rows: int | None = None) -> None:
        """Band (row0, rows) of the image (default: the whole view, one band), and its part of the loss if a target
        is set, as launches on the active tape (or just run). The loss is zeroed by the first band (row0 0) and
        each band adds its part; a view of several bands also gets each band's image into `frame`."""
        if not self.width:
            raise RuntimeError("DiffRenderer: set_view first")
        rows = self.height if rows is None else rows
        if self.width * rows > self.band_pixels:
            raise RuntimeError(f"a band of {rows} rows of {self.width}: this renderer's bands hold {self.band_pixels} "
                               f"pixels; record each of `bands()`")
        self._kept = None
        self._band = (row0, rows)
        n_px = self.width * rows
        custom("render: march (untaped)", self._march, _no_adjoint, reads=[self.theta],
               writes=[self.scene, self.active, self.march_t, self.march_edges, self.slot_pos, self.slot_count,
                       self.most_slots])
        if self.tape.recording:
            self.taped_count.copy_from(self.slot_count)  # on the device: no wait
            self._declare_used_rows()
        launch(reduce.broadcast_rows, self.theta, self.slot_count, self.theta_slots, self.theta_partial,
               name="render: theta per slot")
        taped = recording()  # (read here: a custom step's forward runs with the tape paused)
        custom("render: hold (untaped)", lambda: self._hold(taped), _no_adjoint,
               reads=[self.theta, self.theta_slots, self.scene, self.march_t, self.march_edges, self.slot_pos],
               writes=[self.theta_fixed, self.held_t, self.held_mat, self.held_ao, self.held_shadow, self.points,
                       self.held_grad, self.jacobian])
        custom("render: SDF at the held points", _already_evaluated, self._samples_adjoint,
               reads=[self.theta_slots, self.points, self.jacobian], writes=[self.values])
        launch(raymarch_grad.shade_slots, self.theta_slots, self.cam, self.width, self.height, row0, rows,
               self.slot_pos, self.slot_count, self.held_t, self.held_mat, self.held_ao, self.held_shadow, self.points,
               self.held_grad, self.values, self.colour, self.ratio,
               name="render: shade slots (Newton step, edges, shadows)")
        launch(soft_min_layers, self.ratio, self.colour, self.active, n_px, self.kappa, self.soft_ratio,
               self.soft_colour, self.weight, name="render: soft minimum over edge layers")
        forward = self.compare == "forward"
        launch(raymarch_grad.compose, self.colour, self.active, self.soft_ratio, self.soft_colour, self.cam, self.width,
               self.height, row0, rows, self.edge_px, self.diff_image if forward else self.image,
               name="render: compose and tone-map")
        if forward:
            if row0 == 0:
                custom("render: the forward renderer's image (untaped)", self._forward_image, _no_adjoint,
                       reads=[self.theta, self.cam], writes=[self._forward.prm_buffer, self._forward.rgb_buffer])
            launch(substitute_image, self.diff_image, self._forward.rgb_buffer, row0 * self.width, n_px, self.image,
                   name="render: forward image, differentiable gradient")
        if self.has_target:
            self._record_loss(row0, rows)
        if len(self.bands()) > 1:
            custom("render: the band's image into the view's", self._place_band, _no_adjoint,
                   reads=[self.image, self.diff_image], writes=[self.frame, self.diff_frame])

    def _declare_used_rows(self) -> None:
        """Tell the tape which rows of each gradient this band and the slot count (on the device) use
        (`Tape.used_rows`): zeroing them
        alone is 4x less work at 256x128 than the fields' 512x256 (measured before: ~40 ms of a ~190 ms taped render
        zeroing the whole fields)."""
        row0, rows = self._band
        n_px = self.width * rows
        for f in (self.theta_slots, self.points, self.values):
            self.tape.used_rows(f, self.taped_count)
        for f in (self.colour, self.ratio):
            self.tape.used_rows(f, raymarch_grad.N_LAYERS * n_px)
        for f in (self.soft_ratio, self.soft_colour, self.diff_image):
            self.tape.used_rows(f, n_px)
        for level, (image, terms) in enumerate(zip(self.images, self.terms)):
            w, h = self._level_size(level)[0], self._band_level(level, row0, rows)[1]
            self.tape.used_rows(image, w * h)
            self.tape.used_rows(terms, w * h)

    def _march(self) -> None:
        """Untaped: the kinematics, the march of the band, and the list of the slots that exist (`slot_count` of them,
        on the device: every later kernel reads it there, so the host queues the whole evaluation without waiting)."""
        row0, rows = self._band
        n_pixel_slots = raymarch_grad.N_LAYERS * self.width * rows
        capacity = self.slot_pos.shape[0]
        launch(kinematics, self.theta, self.scene)
        launch(raymarch_grad.march_pixels, self.scene, self.cam, self.width, self.height, row0, rows, self.edge_px,
               self.active, self.march_t, self.march_edges, self.lanes)
        launch(reduce.compact, self.active, n_pixel_slots, capacity, self.compact_partial, self.slot_pos,
               self.slot_count)
        if len(self.bands()) > 1:
            launch(raymarch_grad.keep_most, self.slot_count, int(row0 == 0), self.most_slots)
        self._slots_read = None

    @property
    def n_slots(self) -> int:
        """The slots of the last evaluation (`read_slots`)."""
        return self.read_slots()

    def read_slots(self) -> int:
        """The slots of the last evaluation (of a view of several bands: the most of any band), read back from the
        device (one wait, once per evaluation); logs a warning when the view had more than the fields' room (its
        last edge layers were dropped)."""
        if self._slots_read is None:
            count = int((self.most_slots if len(self.bands()) > 1 else self.slot_count)[None])
            capacity = self.slot_pos.shape[0]
            if count > capacity:
                logging.getLogger(__name__).warning(
                    "%d slots at %dx%d, room for %d: the last %d edge layers dropped", count, self.width,
                    self.height, capacity, count - capacity)
            self._slots_read = min(count, capacity)
        return self._slots_read

    def _hold(self, jacobian: bool = True) -> None:
        """Untaped, after `_march`: hold every slot; then the SDF's spatial gradient at every held point, exactly,
        from the sample kernel's adjoint seeded with ones. With `jacobian` (a taped evaluation) that adjoint
        reads the per-slot rows of theta and its parameter gradient is kept too (`raymarch_grad.keep_jacobian`):
        the backward then needs no second SDF adjoint (`_samples_adjoint`); without, it reads the
        gradient-free copy of theta and computes no parameter gradient."""
        row0, rows = self._band
        count = self.slot_count
        launch(raymarch_grad.hold, self.scene, self.cam, self.width, self.height, row0, rows, self.slot_pos, count,
               self.march_t, self.march_edges, self.held_t, self.held_mat, self.held_ao, self.held_shadow, self.points,
               self.values, self.lanes)
        self.theta_fixed.copy_from(self.theta)
        launch(fill_counted_rows, self.points.grad, count, 0.0)
        launch(raymarch_grad.seed_samples, self.values, count)
        for j in range(raymarch_grad.N_SAMPLES):
            theta = self.theta_slots if jacobian else self.theta_fixed
            dispatch(raymarch_grad.sdf_samples.grad, self._sample_args(j, theta))
            if jacobian:
                launch(raymarch_grad.keep_jacobian, self.theta_slots, count, j, self.jacobian)
        launch(raymarch_grad.hold_gradients, self.points, count, self.held_grad)
        # the samples' adjoints start from zero on the tape (`_samples_adjoint` reads values.grad); points.grad is
        # read by nothing after this copy, and zeroed above before the next hold's seeds
        launch(fill_counted_rows, self.values.grad, count, 0.0)

    def _forward_image(self) -> None:
        """Untaped: theta's kinematics and the camera packed on the device, and the forward renderer's frame."""
        launch(pack_forward, self.theta, self.cam, self._forward.prm_buffer)
        self._forward.render_packed()

    def _place_band(self) -> None:
        """Untaped: the band's images (compared, and the differentiable render's own) into the view's."""
        row0, rows = self._band
        first, n_px = row0 * self.width, self.width * rows
        launch(raymarch_grad.place_band, self.image, first, n_px, self.frame)
        if self.compare == "forward":
            launch(raymarch_grad.place_band, self.diff_image, first, n_px, self.diff_frame)

    def _sample_args(self, j: int, theta) -> tuple:
        return (theta, self.points, self.held_shadow, self.slot_count, j, self.values)

    def _samples_adjoint(self) -> None:
        """The sample launches' adjoint in theta: theta_slots.grad from values.grad and the Jacobians the hold kept."""
        launch(raymarch_grad.samples_adjoint, self.values, self.jacobian, self.slot_count, self.theta_slots)

    def _record_loss(self, row0: int, rows: int) -> None:
        """The band's loss terms at every pyramid level, added into the loss (zeroed by the first band), each level
        scaled by the view's pixels at that level."""
        if row0 == 0:
            self.loss.fill(0.0)  # Taichi's own fill: neither recorded nor differentiated
        for level in range(self.levels):
            (w, h), (level_row0, level_rows) = self._level_size(level), self._band_level(level, row0, rows)
            if level > 0:
                pw, prows = self._level_size(level - 1)[0], self._band_level(level - 1, row0, rows)[1]
                launch(image_loss.downsample, self.images[level - 1], pw, prows, self.images[level],
                       name="loss: downsample")
            n = w * level_rows
            launch(image_loss.image_loss_terms, self.images[level], self.targets[level], self.weights[level],
                   level_row0 * w, n, self.loss_kind, self.terms[level], self.dloss[level],
                   name=f"loss: level {level} terms")
            launch(reduce.sum_into, self.terms[level], n, 1.0 / (3.0 * w * h * self.levels), self.partials[level],
                   self.loss, name=f"loss: level {level} sum")

    def _record_image(self, row0: int, rows: int) -> None:
        """`record` of band (row0, rows) without the loss, whether a target is set or not."""
        has_target, self.has_target = self.has_target, False
        try:
            self.record(row0, rows)
        finally:
            self.has_target = has_target

    def _render_bands(self) -> None:
        """Every band of the image at the current theta, without the loss."""
        for row0, rows in self.bands():
            self._record_image(row0, rows)

    def render(self) -> np.ndarray:
        """The image at the current theta, linear RGB (height, width, 3) float32 (no tape)."""
        self._render_bands()
        self.read_slots()  # the host waits here anyway: warn of dropped edge layers, if any
        return self.image_numpy()

    def image_numpy(self, differentiable: bool = False) -> np.ndarray:
        """The last evaluation's image as (height, width, 3) float32: the one the loss compared, or (with
        `differentiable`) the differentiable render's own (the same unless `set_compare("forward")`)."""
        own = differentiable and self.compare == "forward"
        if len(self.bands()) > 1:
            field = self.diff_frame if own else self.frame
        else:
            field = self.diff_image if own else self.image
        return field.to_numpy()[:self.n_px].reshape(self.height, self.width, 3)

    def loss_and_gradient(self) -> tuple[float, np.ndarray]:
        """Loss against the target at the current theta, and d loss / d theta (float64 copy of the f32 gradient)."""
        self.gradient_on_device()
        self.read_slots()  # the host waits here anyway: warn of dropped edge layers, if any
        return float(self.loss[None]), self.theta.grad.to_numpy().astype(np.float64)

    def gradient_on_device(self) -> None:
        """`loss_and_gradient` left on the device: the loss in `self.loss`, d loss / d theta in `self.theta.grad`.
        The host queues the launches and waits for nothing (an optimiser on the device takes it from there:
        engine.theta_adam). A view of several bands: each band recorded and reversed in turn, its gradient added
        to theta's (the tape keeps theta's gradient between bands), its loss to the loss."""
        if not self.has_target:
            raise RuntimeError("DiffRenderer: set_target first")
        for k, (row0, rows) in enumerate(self.bands()):
            self.tape.reset(keep=(self.theta,) if k else ())
            with self.tape:
                self.record(row0, rows)
            self.tape.backward(self.loss)

    def render_taped(self) -> np.ndarray:
        """`render()`, the render kept on the tape: an `image_jacobian()` at this theta (and view and loss
        settings) then runs only the reverse passes. A trial that may become the next linearisation point renders
        so at no extra cost. A view of several bands keeps none (the tape holds one band): plain `render()`."""
        if len(self.bands()) > 1:
            return self.render()
        self.tape.reset()
        with self.tape:
            image = self.render()
        self._kept = self._image_key()
        return image

    def _image_key(self) -> bytes:
        """What the image depends on: theta, the view, the edges' width and sharpness, the comparison."""
        return self.theta.to_numpy().tobytes() + self._cam_params.tobytes() \
            + repr((self.width, self.height, self.edge_px, self.kappa, self.compare)).encode()

    def image_jacobian(self) -> tuple[np.ndarray, np.ndarray]:
        """The image at the current theta and its exact Jacobian d image / d theta, per pixel.

        Returns (image (H, W, 3) float32, jacobian (H, W, 3, N_THETA) float64). One taped render (none if
        `render_taped` left one at this theta) and three reverse passes, one per colour channel with that
        channel's image gradient seeded with 1: every slot's row of `theta_slots.grad` is then d(its pixel's
        channel)/d theta, because a pixel's image depends only on its own slots (shade, soft minimum and compose
        are per pixel); the rows are summed per pixel, layer by layer in slot order. The loss's own gradient is
        sum_p dloss_p . J_p (a test checks it). A view of several bands: each band's taped render and reverse
        passes in turn."""
        bands = self.bands()
        if len(bands) == 1 and self._kept != self._image_key():
            self.render_taped()
        n = self.n_px
        if self._jac is None or self._jac.shape[0] != n:
            self._jac = ti.ndarray(ti.f64, (n, 3, N_THETA))  # per view: a new size recompiles nothing
        for row0, rows in bands:
            if len(bands) > 1:
                self.tape.reset()
                with self.tape:
                    self._record_image(row0, rows)
            n_band = self.width * rows
            for channel in range(3):
                self.tape.zero_grad()
                launch(raymarch_grad.seed_channel, self.image.grad, n_band, channel)
                self.tape.backward(None)
                launch(raymarch_grad.pixel_rows, self.theta_slots.grad, self.slot_pos, self.slot_count, n_band,
                       row0 * self.width, channel, self._jac)
        jac = self._jac.to_numpy()
        return self.image_numpy(), jac.reshape(self.height, self.width, 3, N_THETA)

    def loss_value(self) -> float:
        """The loss at the current theta, no gradient."""
        if not self.has_target:
            raise RuntimeError("DiffRenderer: set_target first")
        for row0, rows in self.bands():
            self.record(row0, rows)
        return float(self.loss[None])

    def destroy(self) -> None:
        for g in self.groups:
            g.destroy()


def slot_capacity(width: int, height: int, rows: int | None = None) -> int:
    """The slots a renderer for views up to width x height allocates for a band of `rows` rows (default: all): a
    hit per pixel of the band and EDGE_SLOTS_PER_SPAN edge layers per pixel of the view's width + height (a band
    has no more edge layers than its view), at most every layer of every pixel of the band."""
    band_px = width * (height if rows is None else rows)
    return min(band_px + EDGE_SLOTS_PER_SPAN * (width + height), raymarch_grad.N_LAYERS * band_px)


def band_rows(width: int, height: int, band_pixels: int = BAND_PIXELS) -> int:
    """The rows of a band of a renderer for views up to width x height: every row if the view has at most
    band_pixels pixels, else as many whole multiples of BAND_ALIGN rows as fit in band_pixels (at least one)."""
    if width * height <= band_pixels:
        return height
    return min(height, max(BAND_ALIGN, band_pixels // width // BAND_ALIGN * BAND_ALIGN))


_shared: dict[tuple[int, int], DiffRenderer] = {}


def shared_renderer(max_width: int = 256, max_height: int = 128) -> DiffRenderer:
    """This process's renderer of that maximum size, made on first use and kept.

    Taichi compiles each kernel once per set of fields, so a second renderer would compile
    every kernel again (minutes for the taped ones): callers share one. Its view, theta,
    target and loss settings are whatever the last caller set."""
    key = (int(max_width), int(max_height))
    if key not in _shared:
        _shared[key] = DiffRenderer(*key)
    return _shared[key]


def _padded(values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, *values.shape[1:]), np.float32)
    out[:len(values)] = values
    return out


# ---- the held slots read back (for the checks: engine.checks.render_checks) ----

def held_layers(r: DiffRenderer) -> dict[str, np.ndarray]:
    """The last evaluation's held slots as (N_LAYERS, height, width) arrays: active, covering (an edge layer
    whose ratio is inside the edge width, so it covers part of its pixel), material, ao, normal (... 3). A view
    of several bands renders each band again (untaped, at the current theta) to read its slots."""
    bands = r.bands()
    parts = []
    for row0, rows in bands:
        if len(bands) > 1:
            r._record_image(row0, rows)
        parts.append(_band_layers(r, r.width * rows))
    return {key: np.concatenate([part[key] for part in parts], axis=1) for key in parts[0]}


def _band_layers(r: DiffRenderer, n: int) -> dict[str, np.ndarray]:
    """`held_layers` of the band last recorded (n of its pixels)."""
    shape = (raymarch_grad.N_LAYERS, n // r.width, r.width)
    slots = min(int(r.slot_count[None]), r.slot_pos.shape[0])
    grad, material, ao = _at_pixel_slots(r, slots, n, r.held_grad.to_numpy()[:, raymarch_grad.S_POINT],
                                         r.held_mat.to_numpy(), r.held_ao.to_numpy())
    grad = grad.reshape(*shape, 3)
    normal = grad / np.maximum(np.linalg.norm(grad, axis=-1, keepdims=True), 1e-12)
    active = r.active.to_numpy()[:raymarch_grad.N_LAYERS * n].reshape(shape) != 0
    covering = active & (r.ratio.to_numpy()[:raymarch_grad.N_LAYERS * n].reshape(shape) < r.edge_px)
    covering[0] = False
    return {"active": active, "covering": covering, "material": material.reshape(shape), "ao": ao.reshape(shape),
            "normal": normal}


def per_pixel_slot(r: DiffRenderer, *values: np.ndarray) -> list[np.ndarray]:
    """The last evaluation's per-slot `values` (each a field's to_numpy(), compact slots first) at their pixel
    slots: one (N_LAYERS * n_px, ...) array each, zero where no slot exists (slot_pos read back once). A view of
    one band only (the fields hold the last band)."""
    if len(r.bands()) > 1:
        raise RuntimeError(f"per_pixel_slot: a {r.width}x{r.height} view renders in {len(r.bands())} bands; the slots "
                           f"held are the last band's (use held_layers)")
    return _at_pixel_slots(r, r.n_slots, r.n_px, *values)


def _at_pixel_slots(r: DiffRenderer, slots: int, n_px: int, *values: np.ndarray) -> list[np.ndarray]:
    pos = r.slot_pos.to_numpy()[:slots]
    out = []
    for v in values:
        at = np.zeros((raymarch_grad.N_LAYERS * n_px, *v.shape[1:]), v.dtype)
        at[pos] = v[:slots]
        out.append(at)
    return out


def edge_mask(r: DiffRenderer) -> np.ndarray:
    """Pixels whose colour has a silhouette (an edge layer covering part of it) in it (bool (height, width))."""
    return held_layers(r)["covering"].any(axis=0)


def run_render_gradient(theta: np.ndarray, target: np.ndarray, weight: np.ndarray, width: int, height: int,
                        azimuth: float = Camera.azimuth, elevation: float = Camera.elevation,
                        distance: float = Camera.distance, max_width: int = 512, max_height: int = 256,
                        levels: int = 1, compare: str = "diff", edges: bool = False) -> dict:
    """The parity computation "render_gradient": loss and d loss / d theta of the shared renderer on this backend
    for the given theta, target image (linear (height, width, 3)) and per-pixel loss weights, 1-pixel silhouettes,
    an L2 loss over `levels` pyramid levels, comparing the `compare` image (DiffRenderer.set_compare) with the
    target. "image": the compared image; "diff_image": the differentiable render's own; with `edges`, also
    "edges": `edge_mask` (for `bench.invert.check`)."""
    r = shared_renderer(max_width, max_height)
    r.set_view(Camera(azimuth=float(azimuth), elevation=float(elevation), distance=float(distance)), int(width),
               int(height))
    r.set_compare(str(compare))
    r.set_loss("l2", int(levels), 1.0)
    r.set_theta(theta)
    r.set_target(target, weight)
    loss, grad = r.loss_and_gradient()
    out = {"loss": np.float64(loss), "grad": grad, "image": r.image_numpy(), "diff_image": r.image_numpy(True)}
    if edges:
        out["edges"] = edge_mask(r)
    return out
