"""The controller: turns the state into worker requests and worker answers into state.

`tick(state, dt)` runs once per frame on the UI thread, before the panels draw:

1. drain both links' answers into the state (frames, fit snapshots, parity results,
   errors);
2. advance the timeline while playing;
3. run the commands the panels queued (reset, step, export, gradient parity), and, once the first frame is
   done, the inverse render's and the fit's set-up (so the first picture waits on the ray-march kernel alone,
   and on its one-ray-per-thread form, which compiles in seconds; the packets' form compiles after the set-up);
4. ask for the frame the panel should show: at preview quality while the user
   interacts or the timeline plays, at full quality once still (newest request wins,
   so a slow frame never queues up behind stale ones);
5. keep the running fit going as the primary link's idle work, so frames (higher
   priority) interleave with fit batches and the view stays interactive;
6. send the latest full-quality frame to the parity backend when its worker is idle;
7. every GRAD_PARITY_EVERY_S, while the fit has moved on, evaluate its gradient on the primary
   (between batches: the fit keeps running) and again at the same vertices on the parity backend;
8. keep a running inverse render (the recovery `invert` runs) going: one batch (INVERT_BATCH_S) in flight at a
   time, its images rendered at most every INVERT_IMAGE_EVERY_S, until the worker says it is done; its render
   gradient is compared across backends when the parity panel asks, the way the claim
   `render_grad_parity` compares it: A then B over the whole image, then (where a last-bit difference
   flipped a march decision on a few silhouette pixels) A then B again over the pixels whose images agree.

The primary backend (`--arch`) runs the renderer and the fit in one worker; the
parity backend (`--parity-arch`) runs in another, and B's render gradient in a third on the same
backend, started on the first "compare render gradient". See `app.ui.links`.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from app.claims.thresholds import GRAD_RTOL, PIXEL_ATOL
from app.ui.links import Answer, Request, WorkerLink
from app.ui.parity_summary import summarise
from app.ui.state import AppState, Command, invert_reset_command, reset_command
from engine.errors import UserError
from engine.image_io import write_png
from engine.parity import agreeing_pixels, compare, relative_gap

SERVICES = "app.ui.services"
FIT_BATCH_S = 0.05  # a running fit returns to the link this often, so frames can interleave
GRAD_PARITY_EVERY_S = 2.0  # the live fit's gradients are compared across backends at most this often
INVERT_BATCH_S = 0.3  # a running inverse render returns to the link this often
INVERT_IMAGE_EVERY_S = 1.0  # ...and renders its images for the panel at most this often (a render costs 2/3 of a step)
INVERT_MAX_STEPS = 1_000_000  # a running batch's step limit: its time budget ends it
# how long the window's exit waits for busy workers to leave after their current kernel (the longest compiles in ~8 s
# on 2 quiet cores): one that leaves writes what it compiled to the kernel cache, one killed after this loses it
EXIT_GRACE_S = 12.0
INVERT_VIEW = (256, 128)  # the inverse render panel's resolution: the claim's (at 128x64 the arm is too thin to recover)
INVERT_TIMEOUT_S = 1800.0  # a cold start compiles the differentiable renderer: minutes on a loaded 2-core machine
MIN_RENDER_PX = 32
FIRST_FRAME_LANES = 1  # rays per thread of the primary's first frame (engine.kernels.lanes; later frames: the backend's)
FIRST_CALLS = {  # a worker's first call of these compiles kernels: the status bar says so meanwhile
    "render_frame": "compiling the ray-march kernel",
    "fit_reset": "setting up the fit (BVH, Chamfer kernels)",
    "fit_run": "compiling the shape-fit step",
    "fit_gradient_at": "compiling the shape-fit kernels",
    "invert_reset": "compiling the differentiable renderer",
    "render_gradient": "compiling the differentiable renderer",
}
START_UP = {"primary": ("render_frame", "fit_reset"), "parity": ("render_frame", "fit_gradient_at")}  # + each start
# how many Taichi kernels each first call prepares, per arch and worker ("cpu/primary/render_frame"), as counted in
# the window test's run (tests/test_gui.py checks it and rewrites it with UPDATE_GOLDEN=1): the n of "k of n kernels"
KERNEL_MANIFEST = Path(__file__).with_name("kernel_manifest.json")
SCREENSHOT_DELAY_FRAMES = 2  # a screenshot waits until the menu or dialog that asked for it is gone
HIDDEN_VIEW_PX = (640, 360)  # frames for the parity panel when the ray-march panel is not shown
LAYOUT_FRAMES = 3  # the docked panels have their sizes after this many frames


@dataclass
class RenderGradRound:
    """A render-gradient comparison under way: what A answered, carried as its requests' context."""

    iteration: int  # the inverse render's iteration it was taken at
    at: dict  # the "render_gradient" inputs (theta, target, weight, width, height) A evaluated
    grad_a: np.ndarray  # (N_THETA,) d loss / d theta on A
    image_a: np.ndarray  # (H, W, 3) linear, A's image at theta
    agree: np.ndarray | None = None  # (H, W) bool, pixels whose images agree on A and B (after the whole-image round)
    whole_rel: float = 0.0  # max |gA - gB| / max |gA| over the whole image


def _parity_post(answer: Answer) -> None:
    """Parity link: compare B's answer with A's (carried in the request context), off the UI thread."""
    if answer.request.slot == "render_grad":
        round_ = answer.request.context
        answer.extra = {"rel": relative_gap(round_.grad_a, answer.outputs["grad"])}
        if round_.agree is None:
            answer.extra["agree"] = agreeing_pixels(round_.image_a, answer.outputs["image"], PIXEL_ATOL)
        return
    reference, atol = answer.request.context[:2]
    if answer.request.slot == "render":
        answer.extra = summarise(reference, answer.outputs["linear"], atol)
    else:  # "grad": the fit's
        answer.extra = {"report": compare(reference, answer.outputs["grad"], atol)}


class Controller:
    """Owns the two worker links; see the module docstring."""

    def __init__(self, state: AppState, on_answer: Callable[[], None] | None = None):
        """on_answer: called from a link's thread after each answer (the app wakes its window)."""
        # after the first frame (which allocates no fields) the inverse render goes first: its fields must be the
        # worker's first (Taichi's offline cache is keyed by SNode ids), or its kernels compile again (minutes)
        # instead of loading
        self.primary = WorkerLink(state.arch, priorities=("invert", "fit", "render"), queued=("invert", "fit"),
                                  on_answer=on_answer)
        self.parity = WorkerLink(state.parity_arch, priorities=("grad", "render"), post=_parity_post,
                                 on_answer=on_answer)
        # B's render gradient runs in a worker of its own, started on the first "compare render gradient": there the
        # differentiable renderer's fields are the first, as in the processes that filled the cache (the render
        # tests' and the claims' workers, `invert`), so its kernels load (seconds) instead of compiling (minutes),
        # and the parity worker goes on comparing frames and the fit's gradients meanwhile
        self.render_grad = WorkerLink(state.parity_arch, priorities=("render_grad",), post=_parity_post,
                                      on_answer=on_answer)
        self._fit_started: float | None = None  # perf_counter when the running fit's rate window began
        self._fit_iterations_at_start = 0
        self._first_calls = {self.primary: set(FIRST_CALLS), self.parity: set(FIRST_CALLS),
                             self.render_grad: set(FIRST_CALLS)}
        self._roles = {self.primary: "primary", self.parity: "parity", self.render_grad: "render_grad"}
        self._kernels_expected: dict[str, int] = json.loads(KERNEL_MANIFEST.read_text())
        self._started_at: dict[tuple[WorkerLink, str], float] = {}  # when each start-up step was first seen running
        self._grad_in_flight = False  # a gradient comparison is under way (primary, then parity)
        self._grad_compared_iteration = -1  # the fit iteration whose gradients were last compared
        self._grad_due = 0.0  # perf_counter time before which no new comparison starts
        self._invert_in_flight = False  # a batch of the running inverse render is queued or running
        self._invert_started: float | None = None  # perf_counter when the running inversion's rate window began
        self._invert_iterations_at_start = 0
        self._set_up_after_first_frame = False  # `start` sets it: the set-up waits for the first frame

    def start(self, state: AppState) -> None:
        self.primary.start()
        self.parity.start()
        self._set_up_after_first_frame = True

    def _set_up_once_a_frame_is_shown(self, state: AppState) -> None:
        """The inverse render's and the fit's set-up, queued once the primary's first frame is done: the
        ray-march kernel alone stands between the window and its first picture (the forward renderer has no
        fields, so the differentiable renderer's are still the worker's first, as the offline cache needs)."""
        if self._set_up_after_first_frame and (not self._first_frame_pending()
                                               or self.primary.status.startswith("unavailable")):
            self._set_up_after_first_frame = False
            state.commands.append(invert_reset_command(state))
            state.commands.append(reset_command(state))

    def request_stop(self) -> None:
        """Tell every link to stop and every busy worker to leave after its current kernel; returns at once (the
        window calls this as it closes, and `close` after it has gone)."""
        for link in self.links:
            link.request_stop()

    def close(self, grace_s: float = EXIT_GRACE_S) -> None:
        """Stop every link; a worker still running `grace_s` after the stop request (a kernel still compiling) is
        killed, and what it was compiling is lost."""
        self.request_stop()
        deadline = time.monotonic() + grace_s
        for link in self.links:
            link.close(wait_s=max(deadline - time.monotonic(), 0.1))

    @property
    def links(self) -> tuple:
        return self.primary, self.parity, self.render_grad

    # --- once per frame -------------------------------------------------------------------------
    def tick(self, state: AppState, dt: float) -> None:
        self._link_status(state)
        while not self.primary.answers.empty():
            self._primary_answer(state, self.primary.answers.get())
        while not self.parity.answers.empty():
            self._parity_answer(state, self.parity.answers.get())
        while not self.render_grad.answers.empty():
            self._parity_answer(state, self.render_grad.answers.get())
        if state.parity.render_grad_stage and self.render_grad.status.startswith("unavailable"):
            self._render_grad_done(state, f"render gradient comparison failed: {self.render_grad.status}")
        view = state.raymarch
        if view.playing:
            view.t = (view.t + dt * view.speed / view.cycle_s) % 1.0
        self._set_up_once_a_frame_is_shown(state)
        for command in state.commands:
            self._command(state, command)
        state.commands.clear()
        self._request_frame(state)
        self._keep_fitting(state)
        self._request_parity(state)
        self._request_grad_parity(state)
        self._keep_inverting(state)

    def _link_status(self, state: AppState) -> None:
        primary = self.primary.status
        if primary.startswith("unavailable"):
            state.primary_status = primary
            state.error(f"primary backend {state.arch}: {primary}")
        elif primary != "starting" and not state.backend:
            state.backend = self.primary.backend.get("arch", state.arch)
            state.backend_note = self.primary.backend.get("note", "")
            state.primary_status = "ready"
        parity = self.parity.status
        state.parity.status = {"ready": "idle"}.get(parity, parity)
        warmup, done, total = [], 0, 0
        for link, arch, role in ((self.primary, state.arch, "primary"),
                                 (self.parity, f"{state.parity_arch} (parity)", "parity")):
            steps = ("start", *START_UP[role])
            total += len(steps)
            if link.status.startswith("unavailable"):
                done += len(steps)  # nothing more will start there
                continue
            done += (link.status != "starting") + sum(f not in self._first_calls[link] for f in START_UP[role])
            function = link.in_flight.rsplit(":", 1)[-1]
            if link.status == "starting":
                warmup.append(self._running(state, link, "start", f"starting the {arch} backend"))
            elif function in self._first_calls[link]:
                warmup.append(self._running(state, link, function,
                                            f"{FIRST_CALLS[function]} on {arch}, {self._kernels_text(link, function)}"))
        state.warmup, state.warmup_done, state.warmup_total = warmup, done, total
        function = self.primary.in_flight.rsplit(":", 1)[-1]
        state.compiling = (f"{FIRST_CALLS[function]}, {self._kernels_text(self.primary, function)}"
                           if function in self._first_calls[self.primary] else "")

    def _call_key(self, link: WorkerLink, function: str) -> str:
        """The manifest's key of a call: "cpu/primary/render_frame"."""
        return f"{link.backend.get('arch', link.arch)}/{self._roles[link]}/{function}"

    def _kernels_text(self, link: WorkerLink, function: str) -> str:
        """ "k of n kernels" begun by the first call in flight on `link` (n where the manifest knows this call)."""
        k = link.kernels_in_call
        n = self._kernels_expected.get(self._call_key(link, function))
        return f"{k} of {n} kernels" if n and k <= n else f"{k} kernels"

    def _first_call_done(self, state: AppState, link: WorkerLink, answer: Answer) -> None:
        """Record how many kernels a first call prepared (for the manifest's check) and that it is done."""
        function = answer.request.name.rsplit(":", 1)[-1]
        if function in self._first_calls[link] and answer.outputs is not None:
            state.kernels_prepared[self._call_key(link, function)] = answer.kernels
        self._first_calls[link].discard(function)

    def _running(self, state: AppState, link: WorkerLink, step: str, what: str) -> str:
        """`what` with how long this start-up step has run so far (timing text is off in screenshots)."""
        started = self._started_at.setdefault((link, step), time.perf_counter())
        return f"{what} ({time.perf_counter() - started:.0f} s)" if state.show_timings else what

    # --- answers --------------------------------------------------------------------------------
    def _primary_answer(self, state: AppState, answer: Answer) -> None:
        name = answer.request.name.rsplit(":", 1)[-1]
        self._first_call_done(state, self.primary, answer)
        if answer.outputs is None:
            message = answer.error  # one line: a worker's UserError as it is, or what failed in it
            if name == "render_frame":
                state.raymarch.error = message
            elif name == "invert_gradient":
                self._render_grad_done(state, f"render gradient comparison failed: {message}")
            elif name.startswith("invert"):
                view = state.invert
                self._invert_in_flight = False
                view.error, view.running, view.busy = message, False, False
                view.ready = view.ready and name != "invert_reset"
            elif name == "fit_gradient":
                self._grad_in_flight = False
                state.parity.grad_summary = f"gradient comparison failed: {message}"
            else:
                state.fit.error, state.fit.running = message, False
            if name == "fit_reset":  # the worker keeps the fit it had, if any: its controls stay live
                fit = state.fit
                fit.busy, fit.ready = False, bool(fit.loaded_target)
                fit.target = fit.loaded_target or fit.target
            state.error(message)
            return
        out = answer.outputs
        if name == "render_frame":
            view = state.raymarch
            view.error = ""
            view.image, view.image_version = out["srgb"], view.image_version + 1
            view.image_is_full = bool(answer.request.context["full"])
            view.ms_per_frame = float(out["ms"])
            view.frames_rendered += 1
            if "linear" in out:
                view.linear, view.linear_request = out["linear"], answer.request.inputs
        elif name == "fit_reset":
            fit = state.fit
            fit.faces, fit.target_vertices, fit.target_faces = out["faces"], out["target_vertices"], out["target_faces"]
            fit.target_version += 1
            fit.losses, fit.busy, fit.ready, fit.exported, fit.error = [], False, True, "", ""
            fit.loaded_target = str(answer.request.inputs["target"])
            fit.frame_radius = float(max(np.linalg.norm(fit.target_vertices, axis=1).max(), 1.0))  # the sphere: 1
            self._grad_compared_iteration = -1
            self._fit_snapshot(state, out)
        elif name in ("fit_run", "fit_step"):
            self._fit_snapshot(state, out)
        elif name == "fit_export":
            state.fit.exported = str(out["path"])
        elif name in ("invert_reset", "invert_run"):
            self._invert_snapshot(state, out, reset=name == "invert_reset")
        elif name == "invert_gradient":
            round_ = answer.request.context or RenderGradRound(int(out["iteration"]), dict(out["at"]), out["grad"],
                                                                out["image"])
            round_.grad_a = out["grad"]
            first = "render_gradient" in self._first_calls[self.render_grad]
            state.parity.render_grad_stage = (
                f"starting a {state.parity_arch} worker for B, loading (or compiling) the renderer's kernels there"
                if first else f"evaluating on {state.parity_arch} (B)")
            if not self.render_grad.started:
                self.render_grad.start()
            self.render_grad.send(Request("render_grad", "render_gradient", dict(out["at"]), context=round_,
                                          timeout_s=INVERT_TIMEOUT_S))
        elif name == "fit_gradient":
            atol = GRAD_RTOL * float(np.abs(out["grad"]).max())
            self.parity.send(Request("grad", "fit_gradient_at", dict(out["at"]),
                                     context=(out["grad"], atol, int(out["iteration"]))))

    def _fit_snapshot(self, state: AppState, out: dict) -> None:
        fit = state.fit
        fit.vertices, fit.mesh_version = out["vertices"], fit.mesh_version + 1
        fit.losses.extend(float(loss) for loss in out["losses"])
        fit.iteration = int(out["iteration"])
        if fit.running and self._fit_started is not None:
            elapsed = time.perf_counter() - self._fit_started
            if elapsed > 0.5:
                fit.iterations_per_s = (fit.iteration - self._fit_iterations_at_start) / elapsed
        if fit.iteration >= fit.max_iterations:
            fit.running = False
        tape = state.tape
        if "host_launches" in out:  # the batch's second step, counted
            tape.host_iteration, tape.host_launches = int(out["host_iteration"]), int(out["host_launches"])
            tape.host_kernels, tape.host_syncs = int(out["host_kernels"]), int(out["host_syncs"])
            tape.host_sync_sites = [str(site) for site in out["host_sync_sites"]]
        if "tape_iteration" not in out:  # a batch that ran no step (the fit was already at its end)
            return
        # the launches of the batch's first evaluation (the one profiled)
        tape.iteration = int(out["tape_iteration"])
        tape.names = [str(name) for name in out["tape_names"]]
        tape.forward_ms = [float(s) * 1e3 for s in out["tape_forward_s"]]
        tape.backward_ms = [float(s) * 1e3 for s in out["tape_backward_s"]]

    def _invert_snapshot(self, state: AppState, out: dict, reset: bool) -> None:
        """A recovery's snapshot (app.ui.services._invert_snapshot): the steps since the last one, images when it
        carries them (some batches only), the phase, and the verdict once done."""
        view = state.invert
        self._invert_in_flight = False
        if reset:
            view.losses, view.group_errors, view.busy, view.ready, view.error = [], {}, False, True, ""
        if "image" in out:
            view.target, view.image, view.diff = out["target"], out["image"], out["diff"]
            view.image_version += 1
            view.image_iteration = int(out["iteration"])
        view.names, view.units = [str(n) for n in out["names"]], [str(u) for u in out["units"]]
        view.name_groups = [str(g) for g in out["name_groups"]]
        view.true, view.start = [float(v) for v in out["true"]], [float(v) for v in out["start"]]
        view.current = [float(v) for v in out["current"]]
        view.errors = {str(k): float(v) for k, v in out["errors"].items()}
        first = int(out["steps_from"])  # the step the new rows begin at (a batch repeats none, drops none)
        del view.losses[first:]
        view.losses.extend(float(loss) for loss in out["losses"])
        view.groups = [str(g) for g in out["groups"]]
        view.group_units = [str(u) for u in out["group_units"]]
        view.tolerances = [float(v) for v in out["tolerances"]]
        for k, group in enumerate(view.groups):
            series = view.group_errors.setdefault(group, [])
            del series[first:]
            series.extend(float(v) for v in out["error_rows"][:, k])
        view.marks = [(int(step), str(text)) for step, text in zip(out["mark_steps"], out["mark_texts"])]
        view.iteration = int(out["iteration"])
        view.phase, view.done, view.status = str(out["phase"]), bool(out["done"]), str(out["status"])
        view.verdict_line = str(out["verdict_line"])
        if view.running and self._invert_started is not None:
            elapsed = time.perf_counter() - self._invert_started
            if elapsed > 0.5:
                view.iterations_per_s = (view.iteration - self._invert_iterations_at_start) / elapsed
        if view.done:
            view.running = False

    def _parity_answer(self, state: AppState, answer: Answer) -> None:
        """An answer of the parity worker, or of the render-gradient worker (slot "render_grad")."""
        link = self.render_grad if answer.request.slot == "render_grad" else self.parity
        self._first_call_done(state, link, answer)
        view = state.parity
        if answer.outputs is None:
            failed = f"parity comparison failed: {answer.error}"
            if answer.request.slot == "grad":
                view.grad_summary = failed
                self._grad_in_flight = False
            elif answer.request.slot == "render_grad":
                self._render_grad_done(state, failed)
            else:
                view.error = failed
            state.error(failed)
            return
        if answer.request.slot == "render_grad":
            self._render_grad_answer(state, answer)
            return
        if answer.request.slot == "grad":
            self._grad_in_flight = False
            report = answer.extra["report"]
            verdict = "agree" if report.share_within == 1.0 else "DIFFER"
            view.grad_summary = (f"fit gradients at iteration {answer.request.context[2]} {verdict}: "
                                 f"{report.share_within * 100:.2f} % within {GRAD_RTOL:g} of max |grad|, "
                                 f"max |A - B| {report.max_abs_err:.3g}")
            return
        report = answer.extra["report"]
        inputs = answer.request.inputs
        view.error = ""
        view.what = f"frame t={inputs['t']:.3f}, {inputs['width']}x{inputs['height']}, {report.count:,} values"
        view.share_within, view.max_abs_err = report.share_within, report.max_abs_err
        y, x, channel = report.worst_index
        view.worst = f"worst at pixel ({x}, {y}) {'RGB'[channel]}: {report.worst_a:.6g} vs {report.worst_b:.6g}"
        view.heatmap, view.heatmap_version = answer.extra["heatmap"], view.heatmap_version + 1
        view.heatmap_log_range, view.worst_pixels = answer.extra["log_range"], answer.extra["worst_pixels"]
        view.hist_counts, view.hist_log_err = answer.extra["hist_counts"], answer.extra["hist_log_err"]
        view.compared_request = inputs

    def _render_grad_answer(self, state: AppState, answer: Answer) -> None:
        """B's render gradient: done, or (some pixels' images differ) A and B again over the agreeing pixels."""
        round_, rel = answer.request.context, answer.extra["rel"]
        if round_.agree is None:
            round_.agree, round_.whole_rel = answer.extra["agree"], rel
            if not round_.agree.all():
                state.parity.render_grad_stage = f"evaluating on {state.arch} (A) over the pixels whose images agree"
                at = round_.at
                self._send_invert(state, "invert_gradient", {"theta": at["theta"],
                                                             "weight": round_.agree.astype(np.float32)}, round_)
                return
        agree = round_.agree
        verdict = "agree" if rel <= GRAD_RTOL else "DIFFER"
        self._render_grad_done(state, (
            f"render gradient at inverse-render iteration {round_.iteration}: {state.arch} and {state.parity_arch} "
            f"{verdict}: max |A - B| {rel:.2g} of max |grad| (goal <= {GRAD_RTOL:g}) over the {int(agree.sum()):,} "
            f"of {agree.size:,} pixels whose images agree within {PIXEL_ATOL:g}; whole image {round_.whole_rel:.2g}"))

    @staticmethod
    def _render_grad_done(state: AppState, summary: str) -> None:
        state.parity.render_grad_summary, state.parity.render_grad_stage = summary, ""

    # --- requests -------------------------------------------------------------------------------
    def _command(self, state: AppState, command: Command) -> None:
        fit = state.fit
        if command.kind == "fit_reset":
            fit.busy = True
            fit.iterations_per_s = 0.0
            self._send_fit(state, "fit_reset", command.args)
        elif command.kind == "fit_step":
            self._send_fit(state, "fit_run", {"max_steps": 1, "budget_s": 0.0})
        elif command.kind == "fit_export":
            self._send_fit(state, "fit_export", command.args)
        elif command.kind == "fit_open":
            fit.target = fit.path_input = command.args["path"]
            fit.running = False
            self._command(state, reset_command(state))
        elif command.kind == "parity_grad":  # now, whatever the timer says
            self._grad_due, self._grad_compared_iteration = 0.0, -1
        elif command.kind == "invert_reset":
            state.invert.busy, state.invert.iterations_per_s = True, 0.0
            self._invert_in_flight = True
            self._send_invert(state, "invert_reset", {**command.args, "width": INVERT_VIEW[0],
                                                      "height": INVERT_VIEW[1]})
        elif command.kind == "invert_step":
            self._invert_in_flight = True
            self._send_invert(state, "invert_run", {"max_steps": 1, "budget_s": 0.0, "image_every_s": 0.0})
        elif command.kind == "render_grad" and not state.parity.render_grad_stage:
            state.parity.render_grad_stage = f"evaluating on {state.arch} (A)"
            state.parity.render_grad_started = time.perf_counter()
            self._send_invert(state, "invert_gradient", {})
        elif command.kind == "save_frame":
            self._save_frame(state, command.args["path"])
        elif command.kind == "save_screenshot":  # app.ui.app writes it once the frame is drawn
            state.screenshot_path = command.args["path"]
            state.screenshot_frame = state.frame + SCREENSHOT_DELAY_FRAMES

    @staticmethod
    def _save_frame(state: AppState, path: str) -> None:
        """The ray-march frame on screen as a PNG (what the panel shows, at the size it was rendered)."""
        view = state.raymarch
        if view.image is None:
            state.error("save frame: no frame rendered yet")
            return
        try:
            write_png(path, view.image)
        except (OSError, UserError) as exc:
            state.error(f"save frame: cannot write {path}: {exc}")
            return
        height, width = view.image.shape[:2]
        state.saved = f"wrote {path} ({width}x{height}{'' if view.image_is_full else ', preview'})"

    def _send_fit(self, state: AppState, function: str, inputs: dict) -> None:
        if self.primary.status.startswith("unavailable"):
            state.error(f"shape fit: the {state.arch} backend is unavailable")
            return
        self.primary.send(Request("fit", f"{SERVICES}:{function}", inputs))

    def _send_invert(self, state: AppState, function: str, inputs: dict, context=None) -> None:
        if self.primary.status.startswith("unavailable"):
            state.error(f"inverse render: the {state.arch} backend is unavailable")
            state.parity.render_grad_stage = ""
            return
        self.primary.send(Request("invert", f"{SERVICES}:{function}", inputs, context=context,
                                  timeout_s=INVERT_TIMEOUT_S))

    def _keep_inverting(self, state: AppState) -> None:
        view = state.invert
        if not (view.running and view.ready and not view.busy and not view.done):
            self._invert_started = None
            return
        if self._invert_started is None:
            self._invert_started, self._invert_iterations_at_start = time.perf_counter(), view.iteration
        if not self._invert_in_flight:
            self._invert_in_flight = True
            self._send_invert(state, "invert_run", {"max_steps": INVERT_MAX_STEPS, "budget_s": INVERT_BATCH_S,
                                                    "image_every_s": INVERT_IMAGE_EVERY_S})

    def _request_frame(self, state: AppState) -> None:
        view = state.raymarch
        preview = view.playing or time.perf_counter() < view.interacting_until
        scale = min(view.preview_scale, view.res_scale) if preview else view.res_scale
        view_px = view.view_px
        if min(view_px) < MIN_RENDER_PX:
            if state.frame < LAYOUT_FRAMES:
                return  # the panel has not been laid out yet
            view_px = HIDDEN_VIEW_PX  # the panel is not shown (--panel, closed): parity still needs frames
        width, height = (max(int(side * scale), MIN_RENDER_PX) for side in view_px)
        # the first frame one ray per thread: that kernel compiles in seconds, the packets' in a minute (cold); the
        # packets' compile waits until the set-up queued after the first frame is done
        inputs = {"t": round(view.t, 4), "yaw": view.orbit.yaw, "pitch": view.orbit.pitch,
                  "distance": view.orbit.distance, "center": view.orbit.center, "width": width, "height": height,
                  "linear": not preview, "lanes": FIRST_FRAME_LANES if self._first_frame_pending() else 0}
        if inputs == view.requested:
            return
        view.requested = inputs
        self.primary.send(Request("render", f"{SERVICES}:render_frame", inputs, context={"full": not preview}))

    def _first_frame_pending(self) -> bool:
        return "render_frame" in self._first_calls[self.primary]

    def _keep_fitting(self, state: AppState) -> None:
        fit = state.fit
        running = fit.running and fit.ready and not fit.busy
        if running and self.primary.idle_request is None:
            self._fit_started, self._fit_iterations_at_start = time.perf_counter(), fit.iteration
            self.primary.idle_request = Request("fit", f"{SERVICES}:fit_run", {
                "max_steps": fit.max_iterations, "budget_s": FIT_BATCH_S, "until": fit.max_iterations})
            self.primary.poke()
        elif not running and self.primary.idle_request is not None:
            self.primary.idle_request = None
            fit.iterations_per_s = 0.0

    def _request_parity(self, state: AppState) -> None:
        view = state.raymarch
        if (view.linear is None or view.linear_request == state.parity.compared_request
                or self.parity.status != "ready" or self.parity.pending("render")):
            return
        state.parity.compared_request = view.linear_request
        state.parity.status = "busy"
        self.parity.send(Request("render", f"{SERVICES}:render_frame", dict(view.linear_request),
                                 context=(view.linear, state.parity.atol)))

    def _request_grad_parity(self, state: AppState) -> None:
        fit = state.fit
        if (self._grad_in_flight or not fit.ready or fit.busy or fit.iteration == self._grad_compared_iteration
                or time.perf_counter() < self._grad_due or self.parity.status != "ready"):
            return
        self._grad_in_flight, self._grad_compared_iteration = True, fit.iteration
        self._grad_due = time.perf_counter() + GRAD_PARITY_EVERY_S
        self._send_fit(state, "fit_gradient", {})
