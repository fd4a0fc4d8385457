"""app.scenes.run_loop.iterate, the loop the fit and the inverse render share: frames before each step, a raised
stop flag ends it before the next step, a step returning None ends it, an exception propagates."""
import pytest

from app.scenes.run_loop import iterate
from engine.interrupt import StopFlag


def test_steps_run_n_times_with_a_frame_before_each():
    seen = []
    done = iterate(lambda i: seen.append(("step", i)) or f"loss {i}", 3, desc="t",
                   on_frame=lambda i: seen.append(("frame", i)))
    assert done == 3
    assert seen == [("frame", 0), ("step", 0), ("frame", 1), ("step", 1), ("frame", 2), ("step", 2)]


def test_a_raised_flag_lets_the_step_in_progress_finish_and_runs_no_other():
    stop, steps = StopFlag(), []

    def step(i: int) -> str:
        steps.append(i)
        if i == 1:
            stop.request("SIGINT")
        return "ok"

    assert iterate(step, 10, desc="t", stop=stop) == 2 and steps == [0, 1]


def test_a_step_returning_none_ends_an_unbounded_loop():
    phases = iter(["a", "b"])
    assert iterate(lambda _: next(phases, None), None, desc="t", total=5) == 2


def test_an_exception_from_a_step_propagates():
    def step(i: int) -> str:
        if i == 2:
            raise ArithmeticError("diverged")
        return "ok"

    with pytest.raises(ArithmeticError):
        iterate(step, 5, desc="t")
