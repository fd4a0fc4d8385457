"""The tape: reverse pass on a chain, custom steps, pause, hazards, reuse, and the chain on every backend."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import taichi as ti

from engine import taichi_private
from engine.autodiff.access import declare_access, kernel_access
from engine.autodiff.gradcheck import gradcheck
from engine.autodiff.tape import Tape, TapeHazardError
from engine.checks.chain_problem import ChainProblem
from engine.fields import FieldGroup
from engine.kernels.elementwise import affine, sin_map, sum_into
from engine.launch import custom, launch
from tests.conftest import OTHER_ARCHS, backend_worker


@ti.kernel
def square(x: ti.template(), y: ti.template()):
    for i in x:
        y[i] = x[i] * x[i]


@ti.kernel
def fill_with(x: ti.template(), value: ti.f64):
    for i in x:
        x[i] = value


@ti.kernel
def sin_in_place(x: ti.template()):
    for i in x:
        x[i] = ti.sin(x[i])


@ti.kernel
def cube_by_loop(x: ti.template(), y: ti.template()):
    # A `while` loop: Taichi's reverse-mode AD cannot differentiate this kernel.
    for i in x:
        p, k = ti.cast(1.0, x.dtype), 0
        while k < 3:
            p *= x[i]
            k += 1
        y[i] = p


@ti.kernel
def cube_adjoint(x: ti.template(), y: ti.template()):
    for i in x:
        x.grad[i] += 3.0 * x[i] * x[i] * y.grad[i]


@ti.func
def _store(field, i, value):
    field[i] = value


@ti.kernel
def square_via_func(x: ti.template(), y: ti.template()):
    for i in x:
        _store(y, i, x[i] * x[i])


def _opaque_helper(field):
    return field


@ti.kernel
def through_python_helper(x: ti.template(), y: ti.template()):
    for i in x:
        y[i] = x[i]
    _opaque_helper(x)


def _fields(n: int = 6, dtype=ti.f64, count: int = 3):
    group = FieldGroup()
    fields = [group.field(dtype, (n,), needs_grad=True) for _ in range(count)]
    loss = group.field(dtype, (), needs_grad=True)
    group.finalize()
    return group, fields, loss


X = np.linspace(-1.3, 1.7, 6)


def test_chain_backward_matches_analytic_and_finite_differences(ti_cpu):
    chain = ChainProblem(X.size, np.float64)
    chain.x.from_numpy(X)
    tape = Tape()
    with tape:
        chain.forward()
    assert [entry.name for entry in tape.entries] == ["affine", "sin_map", "sum_into"]
    tape.backward(chain.loss)
    np.testing.assert_allclose(chain.x.grad.to_numpy(), 2 * np.cos(2 * X + 0.5), rtol=0, atol=1e-14)
    report = gradcheck(chain.forward, [chain.x], chain.loss, eps=1e-6, atol=1e-8, rtol=1e-7)
    assert report.passed and report.max_abs_err < 1e-8, report
    chain.group.destroy()


def test_launch_outside_a_tape_runs_and_records_nothing(ti_cpu):
    group, (x, y, _), _ = _fields()
    x.from_numpy(X)
    tape = Tape()
    launch(square, x, y)
    np.testing.assert_array_equal(y.to_numpy(), X * X)
    assert tape.entries == []
    group.destroy()


def test_custom_backward_joins_the_reverse_pass(ti_cpu):
    """y = (2x + 0.5)^3 computed by a `while` kernel Taichi cannot differentiate, with a hand adjoint."""
    group, (x, y, z), loss = _fields()
    x.from_numpy(X)
    with pytest.raises(Exception):  # why custom steps exist: Taichi rejects `while` in reverse mode
        cube_by_loop.grad(y, z)

    def forward() -> None:
        loss.fill(0)
        launch(affine, x, y, 2.0, 0.5)
        custom("cube", lambda: launch(cube_by_loop, y, z), lambda: launch(cube_adjoint, y, z), reads=[y], writes=[z])
        launch(sum_into, z, loss)

    tape = Tape()
    with tape:
        forward()
    assert [entry.name for entry in tape.entries] == ["affine", "cube", "sum_into"]
    assert tape.entries[1].kernel is None
    tape.backward(loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 6 * (2 * X + 0.5) ** 2, rtol=1e-14)
    assert len(tape.entries) == 3, "launches made by a custom backward are not recorded"
    assert gradcheck(forward, [x], loss, atol=1e-7, rtol=1e-7).passed
    group.destroy()


def test_pause_runs_without_recording(ti_cpu):
    group, (x, y, z), loss = _fields()
    x.from_numpy(X)
    tape = Tape()
    with tape:
        with tape.pause():
            launch(square, x, y)  # y = x^2, treated as a constant
        launch(sin_map, y, z)
        launch(sum_into, z, loss)
    assert [entry.name for entry in tape.entries] == ["sin_map", "sum_into"]
    np.testing.assert_array_equal(y.to_numpy(), X * X)
    tape.backward(loss)
    np.testing.assert_array_equal(x.grad.to_numpy(), 0.0)
    np.testing.assert_allclose(y.grad.to_numpy(), np.cos(X * X), rtol=1e-14)
    group.destroy()


def test_without_the_check_taichi_gives_wrong_gradients_silently(ti_cpu):
    """The experiment behind the overwrite-after-read hazard (run here, Taichi 1.7.4, cpu).

    y = x^2, then x overwritten with 10, then L = sum(y): the true dL/dx is 2x, but
    square's adjoint reads the overwritten x and returns 20 everywhere, with no error.
    An in-place x = sin(x) likewise returns cos(sin(x))-like garbage instead of cos(x).
    """
    group, (x, y, _), loss = _fields()
    x.from_numpy(X)
    square(x, y)
    fill_with(x, 10.0)
    sum_into(y, loss)
    loss.grad[None] = 1.0
    sum_into.grad(y, loss)
    fill_with.grad(x, 10.0)
    square.grad(x, y)
    np.testing.assert_array_equal(x.grad.to_numpy(), 20.0)  # should be 2x
    assert not np.allclose(x.grad.to_numpy(), 2 * X)

    x.from_numpy(X)
    x.grad.fill(0)
    sin_in_place(x)
    x.grad.fill(1.0)
    sin_in_place.grad(x)
    assert not np.allclose(x.grad.to_numpy(), np.cos(X))
    group.destroy()


def _square_then_refused(x, y, refused: tuple, match: str, name: str | None = None) -> None:
    """Inside a tape: launch square(x, y), then the launch `refused` (kernel, *args), which must raise `match`."""
    launch(square, x, y)
    with pytest.raises(TapeHazardError, match=match):
        launch(*refused, name=name)


def test_overwrite_after_read_is_refused(ti_cpu):
    group, (x, y, _), loss = _fields()
    tape = Tape()
    with tape:
        _square_then_refused(x, y, (fill_with, x, 10.0), r"launch #1 'reset x': argument 'x' is overwritten after "
                                                         r"launch #0 'square' \(argument 'x'\) read it", "reset x")
        with tape.pause():
            launch(fill_with, x, 10.0)  # untaped work is the user's business
    assert len(tape.entries) == 1
    group.destroy()


def test_in_place_update_is_refused(ti_cpu):
    group, (x, _, _), _ = _fields()
    with Tape():
        with pytest.raises(TapeHazardError, match=r"'sin_in_place': argument 'x' is overwritten after "
                                                  r"launch #0 'sin_in_place' itself read it"):
            launch(sin_in_place, x)
    group.destroy()


def test_second_plain_write_is_refused_but_accumulation_is_allowed(ti_cpu):
    group, (x, y, z), loss = _fields()
    tape = Tape()
    with tape:
        _square_then_refused(x, y, (square, z, y), r"launch #1 'square': argument 'y' was already written by "
                                                   r"launch #0 'square'")
        launch(sum_into, y, loss)
        launch(sum_into, x, loss)  # accumulating twice into the loss is fine
    assert [entry.name for entry in tape.entries] == ["square", "sum_into", "sum_into"]
    group.destroy()


def test_the_same_field_twice_with_a_write_is_refused(ti_cpu):
    group, (x, y, _), loss = _fields()
    with Tape():
        with pytest.raises(TapeHazardError, match=r"launch #0 'affine': the same field is passed as arguments "
                                                  r"'x', 'y' and 'y' is written"):
            launch(affine, x, x, 2.0, 0.5)
        launch(sum_into, y, loss)  # reading one field twice would be fine; different fields are fine
    group.destroy()


@pytest.mark.filterwarnings("ignore:.*non-taichi function")  # the helper is opaque on purpose
def test_access_sets_follow_ti_funcs_and_refuse_what_they_cannot_see(ti_cpu):
    assert kernel_access(square_via_func).writes == {"y"} and kernel_access(square_via_func).reads == {"x"}
    assert kernel_access(sum_into).accumulates == {"total"} and kernel_access(sum_into).reads == {"values"}
    assert kernel_access(cube_adjoint).writes == {"x.grad"}
    group, (x, y, _), _ = _fields()
    with Tape():
        launch(square_via_func, x, y)
        with pytest.raises(TapeHazardError, match=r"launch #1 'square_via_func': argument 'y' was already written"):
            launch(square_via_func, x, y)
    with Tape():
        with pytest.raises(TapeHazardError, match=r"cannot tell whether kernel through_python_helper .* argument 'x'.*"
                                                  r"declare_access"):
            launch(through_python_helper, x, y)
    declare_access(through_python_helper, reads=["x"], writes=["y"])
    assert kernel_access(through_python_helper).writes == {"y"}
    with Tape() as tape:
        launch(through_python_helper, x, y)
    assert len(tape.entries) == 1
    group.destroy()


def test_reuse_over_100_iterations_does_not_grow(ti_cpu):
    chain = ChainProblem(X.size, np.float64)
    chain.x.from_numpy(X)
    runtime = taichi_private.get_runtime()
    tape = Tape()
    counts = []
    for _ in range(100):
        with tape:
            chain.forward()
        tape.backward(chain.loss)
        np.testing.assert_allclose(chain.x.grad.to_numpy(), 2 * np.cos(2 * X + 0.5), atol=1e-14)  # no accumulation
        counts.append((len(tape.entries), len(tape._touched), len(tape._readers), runtime.get_num_compiled_functions(),
                       runtime.prog.get_snode_tree_size()))
        tape.reset()
        assert tape.entries == [] and not tape._touched
        np.testing.assert_array_equal(chain.x.grad.to_numpy(), 0.0)
        np.testing.assert_array_equal(chain.y.grad.to_numpy(), 0.0)
        assert chain.loss.grad[None] == 0.0
    assert counts[0][0] == 3 and counts[0][1] == 4
    assert len(set(counts[1:])) == 1, f"tape state, compiled kernels or SNode trees grew: {counts[1]} -> {counts[-1]}"
    chain.group.destroy()


def test_profile_times_each_launch_and_adjoint(ti_cpu):
    chain = ChainProblem(X.size, np.float64)
    tape = Tape(profile=True)
    with tape:
        chain.forward()
    tape.backward(chain.loss)
    assert all(entry.forward_s > 0 and entry.backward_s > 0 for entry in tape.entries)
    quiet = Tape()
    with quiet:
        chain.forward()
    quiet.backward(chain.loss)
    assert all(entry.forward_s is None and entry.backward_s is None for entry in quiet.entries)
    chain.group.destroy()


def test_misuse_raises_errors_that_say_what_to_do(ti_cpu):
    group = FieldGroup()
    x = group.field(ti.f64, (4,), needs_grad=True)
    no_grad = group.field(ti.f64, ())
    group.finalize()
    tape = Tape()
    with pytest.raises(ValueError, match="loss has no gradient; allocate it with needs_grad=True"):
        tape.backward(no_grad)
    with tape:
        with pytest.raises(RuntimeError, match="call it after the with block"):
            tape.backward(x)
        with pytest.raises(RuntimeError, match="already active"):
            tape.__enter__()
    with pytest.raises(RuntimeError, match="outside `with tape:`"):
        tape.record_custom("step", lambda: None)
    group.destroy()


def chain_on_backend(x: np.ndarray) -> dict:
    """The f32 chain (recorded launches, gradient) on whichever backend runs this (a worker)."""
    from engine.checks.chain_problem import run_tape_chain

    return run_tape_chain(x)


@pytest.mark.parametrize("other", OTHER_ARCHS)
def test_chain_on_cpu_and_other_backends_agree_with_the_analytic_gradient(other):
    x = np.random.default_rng(3).uniform(-3, 3, 256).astype(np.float32)
    expected = 2 * np.cos(2 * x.astype(np.float64) + 0.5)
    outs = {arch: backend_worker(arch).call("tests.test_tape:chain_on_backend", x=x) for arch in ("cpu", other)}
    for arch, out in outs.items():
        assert list(out["launches"]) == ["affine", "sin_map", "sum_into"], arch
        assert np.abs(out["dx"] - expected).max() < 1e-5, arch
    np.testing.assert_allclose(outs["cpu"]["dx"], outs[other]["dx"], rtol=0, atol=1e-6)


def test_headless_tape_chain_and_sgd_oracle(tmp_path):
    result = subprocess.run([sys.executable, "-m", "app", "--headless", "--only", "tape_chain,sgd_oracle", "--arch",
                             "cpu", "--parity-arch", "vulkan", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TAPE_CHAIN ACCEPTANCE PASSED" in result.stdout and "SGD_ORACLE ACCEPTANCE PASSED" in result.stdout
    claims = {claim["name"]: claim for claim in json.loads((tmp_path / "report.json").read_text())["claims"]}
    assert set(claims["tape_chain"]["metrics"]) == {"max_abs_err", "parity_max_abs_err"}
    assert set(claims["sgd_oracle"]["metrics"]) == {"orders", "max_ratio_dev", "final_loss"}
    assert claims["tape_chain"]["metrics"]["max_abs_err"] < 1e-5
    assert claims["sgd_oracle"]["metrics"]["orders"] >= 8.5


def test_the_docstring_example_runs(ti_cpu):
    import engine.autodiff.tape as module

    lines = module.__doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    import"))
    end = next(i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith("    "))
    namespace: dict = {}
    exec(textwrap.dedent("\n".join(lines[start:end])), namespace)
    assert namespace["tape"].entries == [] and namespace["x"].grad.to_numpy().max() == 0.0



def test_used_rows_zeroes_the_most_rows_declared_and_reset_forgets_them(ti_cpu):
    """Tape.used_rows: zero_grad zeroes only the declared rows (the most declared since the last reset); rows
    beyond keep what they hold; a reset forgets the declaration (the next zero_grad is whole again)."""
    chain = ChainProblem(X.size, np.float64)
    chain.x.from_numpy(X)
    tape = Tape()
    with tape:
        chain.forward()
    tape.used_rows(chain.x, 3)
    tape.used_rows(chain.x, 5)
    tape.used_rows(chain.x, 2)
    tape.backward(chain.loss)
    full = chain.x.grad.to_numpy()
    tape.zero_grad()
    np.testing.assert_array_equal(chain.x.grad.to_numpy()[:5], 0.0)
    np.testing.assert_array_equal(chain.x.grad.to_numpy()[5:], full[5:])
    np.testing.assert_array_equal(chain.y.grad.to_numpy(), 0.0)  # undeclared: whole
    tape.reset()
    with tape:
        chain.forward()
    chain.x.grad.fill(1.0)
    tape.zero_grad()
    np.testing.assert_array_equal(chain.x.grad.to_numpy(), 0.0)
    chain.group.destroy()
