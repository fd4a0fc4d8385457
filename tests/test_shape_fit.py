"""Shape fit: a short fit lowers the loss, the CLI writes its outputs and refuses bad flags in one
line, export maps back to the file's coordinates, and gradients agree across backends (workers)."""
import json

import numpy as np
import pytest

from app.cli import main as cli_main
from app.scenes.shape_fit import ShapeFit, fit_gradient_at, load_target
from engine.mesh_io import load_mesh, write_mesh
from engine.meshgen import icosphere
from tests.conftest import OTHER_ARCHS, backend_worker


def test_short_fit_lowers_the_loss(ti_cpu):
    fit = ShapeFit("blob", subdiv=1, lr=0.02, smooth=0.1, n_samples=512)
    for _ in range(25):
        fit.step()
    assert fit.iteration == 25 and len(fit.losses) == 25
    assert fit.losses[-1] < 0.2 * fit.losses[0]
    assert fit.orders() > 0.7 and fit.misses() == 0
    assert [entry.name for entry in fit.tape.entries] == ["chamfer: closest points (BVH, untaped)",
                                                          "chamfer: held distances and their sums", "loss: weighted sum"]
    assert fit.vertices().shape == (42, 3) and fit.faces.shape == (80, 3)
    fit.destroy()


def test_smoothing_falls_linearly_to_its_end_value(ti_cpu):
    fit = ShapeFit("torus", subdiv=0, smooth=0.8, smooth_end=0.1, schedule_iters=5, n_samples=64)
    seen = []
    for _ in range(7):
        seen.append(fit.smoothing())
        fit.step()
    np.testing.assert_allclose(seen, [0.8, 0.625, 0.45, 0.275, 0.1, 0.1, 0.1])
    fit.destroy()


def test_export_is_in_the_target_files_coordinates(ti_cpu, tmp_path):
    v, f = icosphere(2)
    write_mesh(tmp_path / "ball.obj", v * 5.0 + [10.0, -3.0, 2.0], f)
    fit = ShapeFit(tmp_path / "ball.obj", subdiv=1, n_samples=256)
    assert np.abs(fit.target.vertices).max() == pytest.approx(1.0)
    fit.export_mesh(tmp_path / "out.obj")
    exported = load_mesh(tmp_path / "out.obj", normalise=False).vertices
    np.testing.assert_allclose(exported, fit.vertices() * 5.0 + [10.0, -3.0, 2.0], rtol=1e-6, atol=1e-6)
    fit.destroy()


def test_cli_writes_json_obj_frames_and_plot(ti_cpu, tmp_path):
    code = cli_main(["fit", "--target", "torus", "--subdiv", "1", "--iters", "6", "--samples", "300",
                     "--smooth", "0.3", "--smooth-end", "0.1", "--arch", "cpu", "--out", str(tmp_path), "--dump-every", "3"])
    assert code == 0
    record = json.loads((tmp_path / "fit.json").read_text())
    assert record["arch"] == "cpu" and record["target"] == "torus" and record["iterations"] == 6
    assert len(record["losses"]) == 6 and record["orders"] == pytest.approx(np.log10(record["losses"][0] / record["losses"][-1]))
    assert record["wall_s"] > 0 and record["misses"] == 0 and record["smooth_end"] == 0.1
    assert load_mesh(tmp_path / "final.obj").faces.shape == (80, 3)
    assert sorted(p.name for p in (tmp_path / "frames").iterdir()) == ["iter_00000.obj", "iter_00003.obj"]
    assert (tmp_path / "loss.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("flags, expected", [
    ([], (0.03, 0.8, 0.1)),  # the recommended settings (app.scenes.fit_settings)
    (["--smooth", "0.3"], (0.03, 0.3, 0.3)),  # a given step stays constant unless --smooth-end says otherwise
    (["--smooth-end", "0.2", "--lr", "0.01"], (0.01, 0.8, 0.2)),
])
def test_cli_defaults_to_the_recommended_schedule(ti_cpu, tmp_path, flags, expected):
    assert cli_main(["fit", "--target", "blob", "--subdiv", "1", "--iters", "2", "--samples", "200",
                     "--arch", "cpu", "--out", str(tmp_path), *flags]) == 0
    record = json.loads((tmp_path / "fit.json").read_text())
    assert (record["lr"], record["smooth"], record["smooth_end"]) == expected


@pytest.mark.parametrize("flags, words", [
    (["--target", "nosuch"], "unknown target 'nosuch'"),
    (["--target", "blob", "--subdiv", "6"], "--subdiv must be an integer in 0..5"),
    (["--target", "blob", "--subdiv", "-1"], "--subdiv must be an integer in 0..5"),
    (["--target", "blob", "--iters", "0"], "--iters must be an integer in 1.."),
    (["--target", "blob", "--lr", "-1"], "--lr must be a positive number"),
    (["--target", "blob", "--smooth", "1.5"], "--smooth must be in 0..1"),
    (["--target", "blob", "--smooth-end", "-0.1"], "--smooth-end must be in 0..1"),
    (["--target", "missing.obj"], "mesh file missing.obj: not found"),
    (["--target", "blob", "--subdiv", "abc"], "argument --subdiv: invalid int value: 'abc'"),
    ([], "the following arguments are required: --target"),
])
def test_cli_bad_flags_are_one_line_exit_2(capsys, flags, words):
    assert cli_main(["fit", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_named_targets_are_normalised():
    for name in ("blob", "torus", "spot", "blub", "penguin"):
        mesh = load_target(name)
        assert np.abs(mesh.vertices).max() == pytest.approx(1.0) and len(mesh.faces) > 1000


def _state(seed: int) -> np.ndarray:
    v, _ = icosphere(1)
    return (v * (0.9 + 0.2 * np.random.default_rng(seed).random((len(v), 1)))).astype(np.float32)


@pytest.mark.parametrize("arch", OTHER_ARCHS)
def test_gradients_agree_across_backends_and_repeat_bit_for_bit(ti_cpu, arch):
    inputs = dict(target=np.array("blob"), subdiv=np.array(1), n_samples=np.array(300), seed=np.array(0))
    worker = backend_worker(arch)
    for seed in (0, 1):
        here = fit_gradient_at(vertices=_state(seed), **inputs)
        there = worker.call("fit_gradient_at", vertices=_state(seed), **inputs)
        again = worker.call("fit_gradient_at", vertices=_state(seed), **inputs)
        np.testing.assert_array_equal(again["grad"], there["grad"])
        assert again["loss"] == there["loss"]
        scale = np.abs(here["grad"]).max()
        assert np.abs(here["grad"] - there["grad"]).max() <= 1e-4 * scale
        assert there["loss"] == pytest.approx(here["loss"], rel=1e-5)
        assert int(there["misses"]) == 0


def test_gradient_at_reuses_its_fit_and_answers_as_a_new_one(ti_cpu):
    import app.scenes.shape_fit as shape_fit

    def tree_order() -> np.ndarray:
        return shape_fit._gradient_fit[1].terms["chamfer"].source_bvh.order.to_numpy()

    inputs = dict(target=np.array("blob"), subdiv=np.array(1), n_samples=np.array(300), seed=np.array(0))
    shape_fit._gradient_fit = None
    fresh = fit_gradient_at(vertices=_state(2), **inputs)
    fresh_order = tree_order()
    shape_fit._gradient_fit = None
    fit_gradient_at(vertices=_state(0), **inputs)
    kept, first_order = shape_fit._gradient_fit[1], tree_order()
    fit_gradient_at(vertices=_state(1), **inputs)
    again = fit_gradient_at(vertices=_state(2), **inputs)
    assert shape_fit._gradient_fit[1] is kept
    assert not np.array_equal(first_order, fresh_order)  # the states sort differently: the check below bites
    np.testing.assert_array_equal(tree_order(), fresh_order)  # re-sorted for the vertices given, as a new fit
    np.testing.assert_array_equal(again["grad"], fresh["grad"])
    assert again["loss"] == fresh["loss"]


def test_looking_at_the_gradient_does_not_change_the_fit(ti_cpu):
    from engine.chamfer_loss import REBUILD_EVERY

    plain = ShapeFit("blob", subdiv=1, lr=0.03, n_samples=300)
    looked = ShapeFit("blob", subdiv=1, lr=0.03, n_samples=300)
    for i in range(REBUILD_EVERY + 5):
        plain.step()
        if i in (0, REBUILD_EVERY - 2, REBUILD_EVERY - 1):  # looks that land on a re-sort, too
            looked.gradient()
        looked.step()
    assert looked.terms["chamfer"].correspondences == plain.terms["chamfer"].correspondences  # the same re-sort schedule
    np.testing.assert_array_equal(looked.x.to_numpy(), plain.x.to_numpy())
    assert looked.losses == plain.losses
    plain.destroy()
    looked.destroy()


def test_the_losses_are_read_every_sync_every_steps_and_a_divergence_is_found_at_its_iteration(ti_cpu):
    """Reading the losses every K steps (one wait for K) changes when the host learns them, not what they are: the
    same losses as reading every step, and a diverging fit stops naming the same first non-finite iteration."""
    from app.scenes.shape_fit import FitDiverged

    def run(sync_every: int, lr: float, steps: int):
        fit = ShapeFit("blob", subdiv=1, lr=lr, smooth=0.1, n_samples=256, sync_every=sync_every)
        try:
            for i in range(steps):
                fit.step()
                assert len(fit.losses_read) == (i + 1) // sync_every * sync_every and fit.iteration == i + 1
            return list(fit.losses), None
        except FitDiverged as exc:
            return list(fit.losses_read), exc
        finally:
            fit.destroy()

    every, ended = run(1, 0.02, 9)
    assert ended is None and run(4, 0.02, 9) == (every, None)  # 8 read by the steps, the 9th by `losses`
    every, ended = run(1, 1e30, 12)
    batched, ended_batched = run(5, 1e30, 12)
    assert ended is not None and ended_batched is not None, "lr 1e30 diverges within 12 steps"
    assert ended_batched.iteration == ended.iteration and batched == every == every[:ended.iteration]
    assert ended_batched.loss != ended_batched.loss or abs(ended_batched.loss) == float("inf")


def test_sync_every_is_checked_like_its_flag():
    from engine.errors import UserError

    for bad in (0, -1, 1.5, True, 10_001):
        with pytest.raises(UserError, match="--sync-every must be an integer in 1..10,000"):
            ShapeFit("blob", subdiv=0, sync_every=bad)
