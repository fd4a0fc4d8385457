"""What the desktop app's backend worker runs (app.ui.services), called in-process on the cpu (the shape fit) or in
a cpu worker of this module's own (the inverse render's recovery: there the differentiable renderer's fields are
the first, so its kernels load from Taichi's cache instead of compiling)."""
import numpy as np
import pytest

from app.ui import services


def test_a_batch_profiles_its_first_step_only(ti_cpu):
    reset = services.fit_reset("blob", subdiv=1, lr=0.03, smooth=0.8, smooth_end=0.1, schedule_iters=10)
    assert int(reset["tape_iteration"]) == 0 and (reset["tape_forward_s"] > 0).all()
    services.fit_run(max_steps=2, budget_s=10.0)
    batch = services.fit_run(max_steps=3, budget_s=10.0)
    assert int(batch["iteration"]) == 5 and len(batch["losses"]) == 3
    assert int(batch["tape_iteration"]) == 2  # the batch's first step evaluated iteration 2
    assert list(batch["tape_names"]) == list(reset["tape_names"])
    # every launch of the profiled step was timed both ways (an untimed one would read 0 here)
    assert (batch["tape_forward_s"] > 0).all() and (batch["tape_backward_s"] > 0).all()
    assert services._fit.tape.profile  # left on for evaluations outside a batch
    # the batch's second step, unprofiled, was counted: the fit's steady iteration (docs/RESULTS.md, host costs):
    # kernel launches only, no wait on the device (the fit reads its losses every sync_every-th step, the batch once)
    assert int(batch["host_iteration"]) == 3 and int(batch["host_launches"]) == int(batch["host_kernels"]) == 13
    assert int(batch["host_syncs"]) == 0 and len(batch["host_sync_sites"]) == 0
    from app.ui.controller import Controller
    from app.ui.panels.tape_panel import host_line
    from app.ui.state import AppState

    state = AppState(arch="cpu", parity_arch="cpu", show_timings=False)
    controller = Controller.__new__(Controller)
    controller._fit_started = None
    controller._fit_snapshot(state, batch)
    assert state.tape.host_syncs == 0 and state.tape.host_iteration == 3
    assert host_line(state.tape) == "host costs (iteration 3, untimed): 13 launches (13 kernels, 0 Taichi calls), 0 host syncs"
    assert services.fit_gradient()["grad"].shape == (42, 3)  # the subdivision-1 icosphere's vertices
    done = services.fit_run(max_steps=3, budget_s=10.0, until=5)  # already there: no step, no tape record
    assert len(done["losses"]) == 0 and int(done["iteration"]) == 5 and "tape_iteration" not in done
    services._fit.destroy()
    services._fit = None


SHORT_SCHEDULE = {"search_evaluations": 30, "scan_points": 3, "pair_points": 3, "lm_iterations": 3,
                  "hops": 1}  # ~25 steps, not
# hundreds (fields the schedule does not have are left out)
SMALL_VIEW = (64, 32)


def short_recovery(gradients: bool, image_every_s: float = 1e9) -> dict:
    """In a worker (its first fields the shared renderer's, so its kernels load from the cache): the panel's
    recovery at SMALL_VIEW with SHORT_SCHEDULE through the services, a Step and then batches of two steps until
    done, with `gradients`, the render-gradient comparison's evaluations (whole image, then a weighted one) before
    every batch. Returns every snapshot, the recovery's own record, and how many of the snapshots' current images
    differ from a fresh render at their theta."""
    import dataclasses
    import functools

    import numpy as np

    from app.scenes import inverse_render

    full = inverse_render.InvertSettings
    known = {f.name for f in dataclasses.fields(full)}
    inverse_render.InvertSettings = functools.partial(full, **{k: v for k, v in SHORT_SCHEDULE.items() if k in known})
    try:
        snapshots = [services.invert_reset(t=0.1, width=SMALL_VIEW[0], height=SMALL_VIEW[1], perturbation=1.0, seed=2)]
    finally:
        inverse_render.InvertSettings = full
    snapshots.append(services.invert_run(max_steps=1, budget_s=0.0, image_every_s=0.0))  # the panel's Step
    weight = np.zeros(SMALL_VIEW[::-1], np.float32)
    weight[:, : SMALL_VIEW[0] // 2] = 1.0
    wrong = reused = 0

    def verify(snapshot: dict) -> dict:  # the image shown is the plain render at the theta shown
        nonlocal wrong, reused
        if "image" in snapshot:
            rec = services._recovery
            reused += rec.image_at(services._shown_theta(rec)) is not None  # shown without a render of its own
            r = inverse_render.renderer()
            r.set_loss("l2", 1, 1.0)
            r.set_theta(services._shown_theta(rec))
            wrong += not np.array_equal(snapshot["image"], inverse_render.side_by_side(r.render(), rec.target)[
                :, SMALL_VIEW[0]:2 * SMALL_VIEW[0]])
        return snapshot

    while not snapshots[-1]["done"] and len(snapshots) < 40:
        if gradients:
            services.invert_gradient()
            services.invert_gradient(weight=weight)
        snapshots.append(verify(services.invert_run(max_steps=2, budget_s=1e9, image_every_s=image_every_s)))
    snapshots.append(services.invert_run(max_steps=2, budget_s=1e9, image_every_s=0.0))  # after the end: nothing new
    rec = services._recovery
    return {"snapshots": snapshots, "losses": np.asarray(rec.losses), "best": rec.best_theta,
            "status": np.array(rec.verdict()["status"]), "steps": np.int64(rec.step_count),
            "wrong_images": np.int64(wrong), "reused_images": np.int64(reused)}


@pytest.mark.slow
def test_the_panel_runs_the_recovery_to_its_verdict_and_the_view_shows_it():
    from app.ui.controller import Controller
    from app.ui.state import AppState
    from tests.conftest import fresh_worker

    worker = fresh_worker("cpu")
    out = worker.call("tests.test_ui_services:short_recovery", timeout_s=1800.0, gradients=False)
    reset, step, *batches, after = out["snapshots"]
    assert int(reset["iteration"]) == 0 and str(reset["status"]) == "running" and not reset["done"]
    assert "image" in reset and reset["image"].shape == (SMALL_VIEW[1], SMALL_VIEW[0], 3)
    # one Step is one step (the identifiability at the start runs with it), with its images
    assert int(step["iteration"]) == 1 and str(step["phase"]) == "search" and "image" in step
    assert [str(t) for t in step["mark_texts"]][:2] == ["identify", "CMA-ES search, half resolution (30 renders)"]
    # running batches carry images only at the end (image_every_s never passed), where they show the result
    assert not any("image" in b for b in batches[:-1]) and "image" in batches[-1]
    final = batches[-1]
    assert final["done"] and str(final["status"]) == str(out["status"]) != "running"
    assert str(final["verdict_line"]).startswith(str(out["status"]).upper().replace("_", " "))
    phases = {str(s["phase"]) for s in batches}
    assert {"search", "Levenberg-Marquardt"} <= phases <= {"search", "Levenberg-Marquardt", "scan"}
    assert int(final["iteration"]) == int(out["steps"]) and int(after["iteration"]) == int(out["steps"])
    assert "image" not in after and len(after["losses"]) == 0  # nothing new after the end
    # every step's loss and error row came exactly once, where `steps_from` says
    snapshots = [reset, step, *batches, after]
    assert [int(s["steps_from"]) for s in snapshots[1:]] == [int(s["iteration"]) for s in snapshots[:-1]]
    assert np.array_equal(np.concatenate([s["losses"] for s in snapshots]), out["losses"])
    assert sum(len(s["error_rows"]) for s in snapshots) == int(out["steps"])

    state = AppState(arch="cpu", parity_arch="cpu", show_timings=False)
    controller = Controller.__new__(Controller)
    controller._invert_started = None
    state.invert.running = True
    for k, snapshot in enumerate(snapshots):
        controller._invert_snapshot(state, snapshot, reset=k == 0)
    view = state.invert
    assert view.done and not view.running and view.status == str(out["status"]) and view.verdict_line
    assert view.losses == list(out["losses"]) and view.iteration == int(out["steps"])
    assert list(view.group_errors) == list(services.INVERT_GROUPS)
    assert all(len(series) == view.iteration for series in view.group_errors.values())
    assert view.image_iteration == view.iteration and view.marks[0] == (0, "identify")
    np.testing.assert_allclose(view.current, final["current"])


@pytest.mark.slow
def test_render_gradient_evaluations_and_images_leave_the_recovery_as_it_was():
    # invert_gradient re-targets the shared renderer (view, weights, theta) and the images re-render it: both put
    # back what the running phase needs, and every image shown is the render at the theta shown
    from tests.conftest import fresh_worker

    worker = fresh_worker("cpu")
    plain = worker.call("tests.test_ui_services:short_recovery", timeout_s=1800.0, gradients=False)
    probed = worker.call("tests.test_ui_services:short_recovery", timeout_s=1800.0, gradients=True, image_every_s=0.0)
    assert np.array_equal(plain["losses"], probed["losses"]) and np.array_equal(plain["best"], probed["best"])
    assert str(plain["status"]) == str(probed["status"])
    assert int(probed["wrong_images"]) == 0 and int(plain["wrong_images"]) == 0
    assert int(probed["reused_images"]) > 0  # the polish's images are its checks' renders (Recovery.image_at)
