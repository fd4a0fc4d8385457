"""What the desktop app's backend worker runs (app.ui.services), called in-process on the cpu."""
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
    assert services.fit_gradient()["grad"].shape == (42, 3)  # the subdivision-1 icosphere's vertices
    done = services.fit_run(max_steps=3, budget_s=10.0, until=5)  # already there: no step, no tape record
    assert len(done["losses"]) == 0 and int(done["iteration"]) == 5 and "tape_iteration" not in done
    services._fit.destroy()
    services._fit = None
