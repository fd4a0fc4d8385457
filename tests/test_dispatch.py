"""Native dispatch (engine/dispatch.py) gives exactly the plain call's results.

Every argument kind the project uses is covered: template fields, f32/f64/i32/u32
scalars, ti.math vectors and matrices, structs, Taichi ndarrays (scalar and vector
elements, with grads), numpy arrays, returned values, and Taichi-generated adjoints.
Each case runs the plain call on one set of buffers and native dispatch on an
identical set, and the outputs must be bit-identical; `dispatch_cases` also runs in a
Vulkan worker. No timing here (see bench/launch.py).
"""

import logging

import numpy as np
import pytest
import taichi as ti

from tests.conftest import OTHER_ARCHS, backend_worker

N = 16
Params = ti.types.struct(scale=ti.f32, shift=ti.math.vec2, steps=ti.i32)


@ti.kernel
def scalars(out: ti.template(), a: ti.f32, b: ti.f64, k: ti.i32, u: ti.u32):
    for i in out:
        out[i] = ti.cast(a * i + b, ti.f32) + ti.cast(k * i, ti.f32) + ti.cast(u % 7, ti.f32)


@ti.kernel
def vectors(out: ti.template(), v: ti.math.vec3, m: ti.math.mat3, iv: ti.math.ivec2):
    for i in out:
        p = ti.Vector([i * 0.5, 1.0 - i, i * i * 0.1])
        out[i] = m @ p + v + ti.cast(iv[0] - iv[1], ti.f32)


@ti.kernel
def copy_vector(out: ti.template(), v: ti.math.vec3):
    for i in out:
        out[i] = v


@ti.kernel
def structured(out: ti.template(), p: Params):
    for i in out:
        out[i] = p.scale * i + p.shift[0] - p.shift[1] + p.steps


@ti.kernel
def arrays(src: ti.types.ndarray(dtype=ti.f32, ndim=1), dst: ti.types.ndarray(dtype=ti.math.vec2, ndim=1),
           host: ti.types.ndarray(dtype=ti.f32, ndim=2), t: ti.f32):
    for i in src:
        dst[i] = ti.Vector([src[i] * t, host[i, 0] + host[i, 1]])
        host[i, 1] += t


@ti.kernel
def scale_points(points: ti.types.ndarray(dtype=ti.math.vec3, ndim=1), s: ti.f64):
    for i in points:
        points[i] = points[i] * ti.cast(s, ti.f32) + ti.Vector([0.0, 1.0, 2.0])


@ti.kernel
def reduce_sq(x: ti.template(), loss: ti.template(), w: ti.f32):
    for i in x:
        loss[None] += w * x[i] * x[i]


@ti.kernel
def ndarray_sq(x: ti.types.ndarray(), y: ti.types.ndarray(), w: ti.f32):
    for i in x:
        y[i] = w * x[i] * x[i]


@ti.kernel
def total(x: ti.template(), w: ti.f32) -> ti.f32:
    s = 0.0
    for i in x:
        s += w * x[i]
    return s


@ti.kernel
def weighted(a: ti.f32, b: ti.f32) -> ti.f32:
    return a * 2.0 + b


def _field(values=None, needs_grad=False, dtype=ti.f32, n=None):
    f = ti.field(dtype, N, needs_grad=needs_grad) if n is None else ti.Vector.field(n, dtype, N)
    if values is not None:
        f.from_numpy(values)
    return f


def dispatch_cases(fresh_context=None) -> dict[str, np.ndarray]:
    """Each case as `<name>.plain` and `<name>.native` arrays (run in any backend's process).

    `fresh_context` forces the one-context-per-launch mode used on CUDA (default: the arch's).
    """
    from engine.dispatch import LaunchSequence, bind, native

    fresh = None if fresh_context is None else bool(fresh_context)
    out: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(7)
    x0 = rng.uniform(-1, 1, N).astype(np.float32)

    def launch_natively(kernel, *args):
        bound = bind(kernel, *args, fresh_context=fresh)
        assert bound.native, bound.fallback_reason
        return bound()

    for mode in ("plain", "native"):
        call = (lambda k, *a: k(*a)) if mode == "plain" else launch_natively
        f = _field()
        call(scalars, f, 0.37, 1.0e-3, -3, 4000000000)
        out[f"scalars.{mode}"] = f.to_numpy()

        g = _field(n=3)
        m = ti.math.mat3([[1.5, -2.0, 0.25], [0.0, 3.0, 1.0], [-1.0, 0.5, 2.0]])
        call(vectors, g, ti.math.vec3(0.1, -0.2, 0.3), m, ti.math.ivec2(5, 2))
        out[f"vectors.{mode}"] = g.to_numpy()

        s = _field()
        call(structured, s, Params(scale=1.25, shift=ti.math.vec2(0.5, 0.125), steps=3))
        out[f"struct.{mode}"] = s.to_numpy()

        src, dst = ti.ndarray(ti.f32, N), ti.ndarray(ti.math.vec2, N)
        src.from_numpy(x0)
        host = np.stack([x0, -x0], axis=1).copy()
        if mode == "plain":
            arrays(src, dst, host, 0.75)
            arrays(src, dst, host, 1.5)
        else:
            bound = bind(arrays, src, dst, host, 0.75, fresh_context=fresh)
            assert bound.native
            bound()
            bound.set("t", 1.5)
            bound()
        out[f"ndarray.{mode}"], out[f"numpy.{mode}"] = dst.to_numpy(), host

        points = np.stack([x0, 2 * x0, -x0], axis=1).copy()  # numpy (N, 3) as an ndarray of vec3
        call(scale_points, points, 1.5)
        out[f"numpy_vec3.{mode}"] = points

        # Gradients: Taichi's adjoint of a field kernel, forward and backward as one sequence.
        x, loss = _field(x0, needs_grad=True), ti.field(ti.f32, (), needs_grad=True)
        loss.grad[None] = 1.0
        if mode == "plain":
            reduce_sq(x, loss, 0.5)
            reduce_sq.grad(x, loss, 0.5)
        else:
            sequence = LaunchSequence([bind(reduce_sq, x, loss, 0.5, fresh_context=fresh),
                                       bind(reduce_sq.grad, x, loss, 0.5, fresh_context=fresh)])
            assert sequence.native
            sequence()
        out[f"grad.{mode}"] = np.append(x.grad.to_numpy(), loss[None])

        # ndarray adjoints (cpu/cuda only in Taichi 1.7.4; Vulkan returns zeros either way).
        xa, ya = ti.ndarray(ti.f32, N, needs_grad=True), ti.ndarray(ti.f32, N, needs_grad=True)
        xa.from_numpy(x0)
        ya.grad.fill(1.0)
        call(ndarray_sq, xa, ya, 2.0)
        call(ndarray_sq.grad, xa, ya, 2.0)
        out[f"ndarray_grad.{mode}"] = np.append(xa.grad.to_numpy(), ya.to_numpy())

        r = _field(x0)
        fast = native(total) if fresh is None else (lambda *a: launch_natively(total, *a))
        values = [(total if mode == "plain" else fast)(r, w) for w in (1.0, -2.5)]
        out[f"return.{mode}"] = np.array(values, np.float32)
    return out


def _assert_cases_equal(out: dict[str, np.ndarray]) -> None:
    names = sorted({key.rsplit(".", 1)[0] for key in out})
    assert len(names) >= 8
    for name in names:
        np.testing.assert_array_equal(out[f"{name}.native"], out[f"{name}.plain"], err_msg=name)


@pytest.mark.parametrize("fresh_context", [None, True], ids=["reused-context", "fresh-context"])
def test_native_equals_plain_on_cpu(ti_cpu, fresh_context):
    _assert_cases_equal(dispatch_cases(fresh_context))


@pytest.mark.parametrize("arch", OTHER_ARCHS)
@pytest.mark.parametrize("fresh_context", [None, True], ids=["reused-context", "fresh-context"])
def test_native_equals_plain_on_other_backends(arch, fresh_context):
    inputs = {} if fresh_context is None else {"fresh_context": np.array(fresh_context)}
    _assert_cases_equal(backend_worker(arch).call("tests.test_dispatch:dispatch_cases", **inputs))


def test_native_kernel_rebinds_on_new_fields_and_updates_scalars(ti_cpu):
    from engine.dispatch import native

    fast = native(scalars)
    a, b = _field(), _field()
    fast(a, 1.0, 0.0, 0, 0)
    fast(b, 2.0, 0.0, 0, 0)
    fast(a, 3.0, 0.5, 1, 2)  # cached binding for `a`, new scalars
    np.testing.assert_array_equal(a.to_numpy(), np.arange(N, dtype=np.float32) * 4.0 + 2.5)
    np.testing.assert_array_equal(b.to_numpy(), np.arange(N, dtype=np.float32) * 2.0)
    assert len(fast._cache) == 2


def test_affine_kernels_native_equal_plain(ti_cpu):
    from engine.checks.affine_problem import AffineProblem
    from engine.dispatch import bind
    from engine.kernels.elementwise import affine, sum_into

    x = np.linspace(-3, 3, N).astype(np.float32)
    results = []
    for use_native in (False, True):
        p = AffineProblem(N)
        p.x.from_numpy(x)
        p.loss[None] = 0.0
        p.loss.grad[None] = 1.0
        launches = [(affine, p.x, p.y, p.a, p.b), (sum_into, p.y, p.loss),
                    (sum_into.grad, p.y, p.loss), (affine.grad, p.x, p.y, p.a, p.b)]
        for kernel, *args in launches:
            bind(kernel, *args)() if use_native else kernel(*args)
        results.append((p.y.to_numpy(), p.loss[None], p.x.grad.to_numpy()))
        p.group.destroy()
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][1] == results[1][1]
    np.testing.assert_array_equal(results[1][2], 2.0)


def test_set_validates_like_the_plain_call(ti_cpu):
    from engine.dispatch import bind

    f = _field()
    bound = bind(scalars, f, 1.0, 0.0, 0, 0)
    with pytest.raises(ti.TaichiRuntimeTypeError):
        bound.set("k", 1.5)  # an i32 slot, like the plain call, refuses a float
    with pytest.raises(ValueError):
        bound.set(0, _field())  # a template argument selects the compiled kernel
    with pytest.raises(KeyError):
        bound.set("nope", 1)
    bound.set(1, 2.0)
    bound()
    np.testing.assert_array_equal(f.to_numpy(), np.arange(N, dtype=np.float32) * 2.0)


def test_array_set_refuses_a_different_compiled_kernel(ti_cpu):
    from engine.dispatch import bind

    src, dst = ti.ndarray(ti.f32, N), ti.ndarray(ti.math.vec2, N)
    bound = bind(arrays, src, dst, np.zeros((N, 2), np.float32), 1.0)
    bound.set("host", np.ones((N, 2), np.float32))  # same dtype and ndim: fine
    with pytest.raises(ValueError):
        bound.set("host", np.ones((N, 2), np.float64))


def test_unsupported_kind_falls_back_loudly_and_still_matches(ti_cpu, caplog):
    from engine.dispatch import bind

    host = np.asfortranarray(np.stack([np.arange(N), np.arange(N)], axis=1).astype(np.float32))
    expected = host.copy()
    src, dst = ti.ndarray(ti.f32, N), ti.ndarray(ti.math.vec2, N)
    arrays(src, dst, expected, 2.0)
    with caplog.at_level(logging.WARNING, logger="engine.dispatch"):
        bound = bind(arrays, src, dst, host, 2.0)
    assert not bound.native and "C-contiguous" in bound.fallback_reason
    assert "falls back to the plain call" in caplog.text
    bound()
    np.testing.assert_array_equal(host, expected)


def test_bind_refuses_inside_a_taichi_tape(ti_cpu):
    from engine.dispatch import bind

    x, loss = _field(np.ones(N, np.float32), needs_grad=True), ti.field(ti.f32, (), needs_grad=True)
    with ti.ad.Tape(loss):
        with pytest.raises(RuntimeError, match="not recorded"):
            bind(reduce_sq, x, loss, 1.0)
        reduce_sq(x, loss, 1.0)


def test_unchanged_values_are_skipped_but_changes_always_arrive(ti_cpu):
    """Writers skip a value provably already in the context; in-place edits and -0.0 still land."""
    from engine.dispatch import native

    fast = native(vectors)
    g = _field(n=3)
    v, m, iv = ti.math.vec3(0.0, 0.0, 0.0), ti.math.mat3(0.0), ti.math.ivec2(0, 0)
    fast(g, v, m, iv)
    v[0], m[1, 1] = 2.0, 3.0  # same objects, new contents
    fast(g, v, m, iv)
    out = g.to_numpy()
    i = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(out[:, 0], 2.0)
    np.testing.assert_array_equal(out[:, 1], 3.0 * (1.0 - i))
    copy = native(copy_vector)
    copy(g, ti.math.vec3(0.0, 1.0, 2.0))
    copy(g, ti.math.vec3(-0.0, 1.0, 2.0))  # == the last value, but not the same bytes
    assert np.signbit(g.to_numpy()[0, 0])
    f = _field()
    fast_scalars = native(scalars)
    for a in (1.0, 1.0, 0.5):
        fast_scalars(f, a, 0.0, 0, 0)
    np.testing.assert_array_equal(f.to_numpy(), i * 0.5)


@ti.data_oriented
class Scaler:
    def __init__(self):
        self.x = ti.field(ti.f32, N, needs_grad=True)
        self.loss = ti.field(ti.f32, (), needs_grad=True)

    @ti.kernel
    def energy(self, w: ti.f32):
        for i in self.x:
            self.loss[None] += w * self.x[i] ** 2


def test_data_oriented_kernels_and_their_grads(ti_cpu):
    from engine.dispatch import bind

    grads = []
    for use_native in (False, True):
        s = Scaler()
        s.x.from_numpy(np.linspace(-1, 1, N).astype(np.float32))
        s.loss.grad[None] = 1.0
        if use_native:
            bind(s.energy, 0.5)()
            bind(s.energy.grad, 0.5)()
        else:
            s.energy(0.5)
            s.energy.grad(0.5)
        grads.append((s.loss[None], s.x.grad.to_numpy()))
    assert grads[0][0] == grads[1][0]
    np.testing.assert_array_equal(grads[0][1], grads[1][1])


def test_call_is_the_native_form_of_any_kernel_and_its_grad(ti_cpu):
    """engine.launch.dispatch runs every launch and every replayed adjoint through `call`."""
    from engine.dispatch import NativeKernel, _natives, call

    results = []
    for launch in (lambda k, *a: k(*a), call):
        s = Scaler()
        s.x.from_numpy(np.linspace(-1, 1, N).astype(np.float32))
        s.loss.grad[None] = 1.0
        f = _field(np.ones(N, np.float32), needs_grad=True)
        loss = ti.field(ti.f32, (), needs_grad=True)
        loss.grad[None] = 1.0
        for w in (0.5, 2.0):
            launch(s.energy, w)
            launch(s.energy.grad, w)
            launch(reduce_sq, f, loss, w)
            launch(reduce_sq.grad, f, loss, w)
        results.append([s.loss[None], s.x.grad.to_numpy(), loss[None], f.grad.to_numpy()])
    for plain, fast in zip(*results):
        np.testing.assert_array_equal(fast, plain)
    assert isinstance(_natives[id(reduce_sq.grad)][1], NativeKernel)


def test_launch_dispatches_natively(ti_cpu):
    from engine.dispatch import _natives
    from engine.launch import launch

    g = _field(n=3)
    launch(copy_vector, g, ti.math.vec3(1.0, 2.0, 3.0))
    np.testing.assert_array_equal(g.to_numpy()[3], [1.0, 2.0, 3.0])
    assert _natives[id(copy_vector)][1]._cache, "engine.launch did not go through native dispatch"


def _plain_and_native(run):
    """`run()` once with every engine.launch launch dispatched plainly, once natively."""
    from engine.dispatch import use_native

    outputs = []
    for enabled in (False, True):
        use_native(enabled)
        try:
            outputs.append(run())
        finally:
            use_native(True)
    return outputs


def test_sgd_oracle_native_equals_plain(ti_cpu):
    """Tape, Taichi adjoints and the SGD optimiser kernels (engine/checks/sgd_oracle_problem.py)."""
    from engine.checks.sgd_oracle_problem import oracle_problem, run_sgd_oracle

    x0, target = oracle_problem()
    plain, fast = _plain_and_native(lambda: run_sgd_oracle(x0, target, steps=5))
    np.testing.assert_array_equal(fast["x"], plain["x"])
    # The loss is a parallel f64 atomic sum: its last bits depend on thread order, run to run.
    np.testing.assert_allclose(fast["losses"], plain["losses"], rtol=1e-9)


def test_shape_fit_native_equals_plain(ti_cpu):
    """BVH refit and queries, Chamfer kernels and custom steps, Adam, Laplacian step (app/scenes/shape_fit.py)."""
    from app.scenes.shape_fit import ShapeFit

    def run():
        fit = ShapeFit("blob", subdiv=1, lr=0.01, smooth=0.2, n_samples=256)
        losses = [fit.step() for _ in range(3)]
        out = (np.array(losses), fit.vertices(), fit.x.grad.to_numpy())
        fit.destroy()
        return out

    for plain, fast in zip(*_plain_and_native(run)):
        np.testing.assert_array_equal(fast, plain)


def test_raymarch_render_bound_equals_plain(ti_cpu):
    """The ray-march kernel takes ndarrays (parameters and four image buffers)."""
    import taichi as ti

    from app.scenes.robot_arm import scene_at
    from engine.dispatch import bind
    from engine.kernels import raymarch
    from engine.kernels.lanes import CPU_LANES
    from engine.render import Camera, pack

    width, height = 21, 12  # (a last packet of the row only partly filled)
    images = []
    for native in (False, True):
        prm = ti.ndarray(ti.f32, raymarch.N_PARAMS)
        buffers = (ti.ndarray(ti.f32, (height, width, 3)), ti.ndarray(ti.f32, (height, width)),
                   ti.ndarray(ti.f32, (height, width, 3)), ti.ndarray(ti.i32, (height, width)))
        frames = []
        for t in (0.0, 2.5):
            prm.from_numpy(pack(scene_at(t), Camera(), width, height))
            if native:
                bound = bind(raymarch.render, prm, *buffers, CPU_LANES)
                assert bound.native
                bound()
            else:
                raymarch.render(prm, *buffers, CPU_LANES)
            frames.append([b.to_numpy() for b in buffers])
        images.append(frames)
    for plain, fast in zip(images[0], images[1]):
        for a, b in zip(plain, fast):
            np.testing.assert_array_equal(b, a)


def test_recorded_iteration_replays_as_one_sequence(ti_cpu):
    """Forward + backward of a taped iteration, replayed natively, equals the tape's own run."""
    from engine.autodiff.tape import Tape
    from engine.dispatch import LaunchSequence
    from engine.kernels.elementwise import affine, sum_into
    from engine.launch import launch

    x0 = np.linspace(-2, 2, N).astype(np.float32)
    results = []
    for replay in (False, True):
        x, y = _field(x0, needs_grad=True), _field(None, needs_grad=True)
        loss = ti.field(ti.f32, (), needs_grad=True)
        tape = Tape()
        with tape:
            launch(affine, x, y, 3.0, 0.25)
            launch(sum_into, y, loss)
        tape.backward(loss)
        sequence = LaunchSequence.from_entries(tape.entries) if replay else None
        for _ in range(2):  # two more iterations: zero, (seed,) forward + backward
            loss[None] = 0.0
            if replay:
                tape.zero_grad()
                loss.grad[None] = 1.0
                sequence()
            else:
                tape.reset()
                with tape:
                    launch(affine, x, y, 3.0, 0.25)
                    launch(sum_into, y, loss)
                tape.backward(loss)
        results.append((loss[None], y.to_numpy(), x.grad.to_numpy()))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_array_equal(results[1][2], 3.0)


def survives_reinit() -> dict:
    """`call` after ti.init re-initialised Taichi (bench all does): rebinds instead of launching void kernels."""
    from engine.dispatch import call

    results = []
    for _ in range(2):
        ti.init(arch=ti.cpu, fast_math=False)
        f = ti.field(ti.f32, N)
        call(scalars, f, 2.0, 1.0, 0, 0)  # keyed by a new field: a new binding either way
        results.append(np.append(f.to_numpy(), call(weighted, 2.0, 1.0)))  # no keyed argument: same key
    return {"first": results[0], "second": results[1]}


def test_call_rebinds_after_taichi_reinit():
    from engine.worker import BackendWorker

    with BackendWorker("cpu") as worker:  # its own process: re-initialising Taichi voids every field there
        out = worker.call("tests.test_dispatch:survives_reinit")
    expected = np.append(np.arange(N, dtype=np.float32) * 2.0 + 1.0, 5.0)
    np.testing.assert_array_equal(out["first"], expected)
    np.testing.assert_array_equal(out["second"], expected)
