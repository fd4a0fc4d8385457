"""engine.host_costs (issue 29 item 2): launches and device-to-host synchronisations per iteration, counted by the
launch layer, the tape and Taichi's host-facing calls; a fit's counts are the measured integers, run after run, and
fit.json records them (`launches_per_iteration`, `host_syncs_per_iteration`).

The shape fit's figures below were measured on 2026-12-02 (cpu; the counts are the same on every backend: they
count calls, not time). Issue 29 item 3 means to cut them (0 host syncs outside every K-th iteration, a third of
the launches): when it does, these numbers change with it, on purpose."""
from __future__ import annotations

import json

import numpy as np
import taichi as ti

from engine import dispatch, launch as launch_module
from engine.host_costs import IterationCosts, count_host_costs

# one steady iteration of ShapeFit("spot", subdiv=2) (ShapeFit.step: correspond, taped Chamfer terms, their weighted
# sum, backward, Adam, smoothing): 44 kernels (11 of them the tape's gradient fills; the sum of one term: its zeroing,
# its add and that add's adjoint) + 1 Taichi call (reading the loss) = 45 launches;
# 1 host sync: the loss read, `float(self.loss.value[None])` in ShapeFit.evaluate
FIT_LAUNCHES, FIT_KERNELS, FIT_SYNCS = 45, 44, 1

def _loss_read_line() -> int:
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "app" / "scenes" / "shape_fit.py").read_text().splitlines()
    return 1 + next(i for i, line in enumerate(lines) if "float(self.loss.value[None])" in line)


FIT_SYNC_SITES = {f"app/scenes/shape_fit.py:{_loss_read_line()} field element read": 1}


def _fit_counts(iterations: int) -> list[tuple[int, int, int]]:
    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit("spot", subdiv=2)
    try:
        rows = []
        for _ in range(iterations):
            with count_host_costs() as costs:
                fit.step()
            rows.append((costs.launches, costs.kernels, costs.host_syncs))
        return rows
    finally:
        fit.destroy()


def test_a_taped_iteration_is_counted_exactly(ti_cpu):
    from engine.autodiff.tape import Tape
    from engine.fields import FieldGroup
    from engine.kernels.elementwise import affine, sum_into

    group = FieldGroup()
    x = group.field(ti.f32, (64,), needs_grad=True)
    y = group.field(ti.f32, (64,), needs_grad=True)
    loss = group.field(ti.f32, (), needs_grad=True)
    group.finalize()
    x.from_numpy(np.linspace(-1.0, 1.0, 64, dtype=np.float32))
    tape = Tape()
    try:
        with count_host_costs() as costs:
            tape.reset()
            loss.fill(0)  # a Taichi data op: one launch, no sync
            with tape:
                launch_module.launch(affine, x, y, 2.0, 0.5)
                launch_module.launch(sum_into, y, loss)
            tape.backward(loss)
            value = loss[None]  # one element read: a launch and a sync
            grad = x.grad.to_numpy()  # a copy to the host: a launch and a sync
        assert abs(value - 32.0) < 1e-3 and np.allclose(grad, 2.0)  # sum(2x + 0.5) over x symmetric about 0
        assert costs.data_ops == 3 and costs.host_syncs == 2
        assert costs.data_op_names == {"field.fill": 1, "field element read": 1, "field.to_numpy": 1}
        # 2 forward launches, their 2 adjoints, and the tape's gradient fills (reset, and the seed of d loss)
        assert costs.kernel_names["affine"] == 2 and costs.kernel_names["sum_into"] == 2
        assert costs.kernels == sum(costs.kernel_names.values()) and costs.launches == costs.kernels + 3
        assert set(costs.kernel_names) == {"affine", "sum_into", "fill_value"}
        sites = sorted(costs.sync_sites)
        assert sites[0].startswith("tests/test_host_costs.py:") and sites[0].endswith("field element read")
    finally:
        group.destroy()


def test_counting_leaves_nothing_wrapped():
    before = (launch_module.native_call, dispatch.BoundLaunch.__call__, dispatch.LaunchSequence.__call__, ti.sync,
              vars(ti.ScalarField)["to_numpy"], vars(ti.MatrixField)["__getitem__"])
    with count_host_costs():
        with count_host_costs():  # nested blocks: both count, the wrappers go with the outer one
            assert launch_module.native_call is not before[0]
        assert ti.sync is not before[3]
    after = (launch_module.native_call, dispatch.BoundLaunch.__call__, dispatch.LaunchSequence.__call__, ti.sync,
             vars(ti.ScalarField)["to_numpy"], vars(ti.MatrixField)["__getitem__"])
    assert after == before


def test_a_fit_iteration_costs_the_measured_counts_run_after_run(ti_cpu):
    first, second = _fit_counts(12), _fit_counts(12)
    assert first == second  # stable: the same counts, iteration by iteration, in a fresh fit
    assert first[0][0] > FIT_LAUNCHES  # the first iteration uploads the target and builds the BVH's buffers
    assert first[1:] == [(FIT_LAUNCHES, FIT_KERNELS, FIT_SYNCS)] * 11


def test_fit_json_records_the_counts(ti_cpu, tmp_path):
    from app.scenes.fit_run import run_fit
    from app.scenes.fit_settings import FitSettings

    result = run_fit(FitSettings("spot", subdiv=2, iterations=12, arch="cpu"), tmp_path / "fit")
    record = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert record["launches_per_iteration"] == FIT_LAUNCHES and record["host_syncs_per_iteration"] == FIT_SYNCS
    costs = record["host_costs"]
    assert costs["iterations_counted"] == 11  # the first 10, then every 10th: 0-9 and 10
    assert costs["launches"][str(FIT_LAUNCHES)] == 10 and costs["host_syncs"] == {"1": 10, "8": 1}
    assert costs["typical_iteration"]["sync_sites"] == FIT_SYNC_SITES
    assert result.record["launches_per_iteration"] == FIT_LAUNCHES
    FitSettings.from_record(record)  # `fit --config fit.json` still reads it


def test_iteration_costs_counts_the_first_then_every_kth():
    costs = IterationCosts(first=2, every=5)
    for i in range(12):
        with costs.iteration(i):
            pass
    assert sum(costs.launches.values()) == 4  # 0, 1, 5, 10
    assert costs.record()["launches_per_iteration"] == 0 and costs.record()["host_syncs_per_iteration"] == 0
