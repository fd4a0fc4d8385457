"""engine.host_costs (issue 29 item 2): launches and device-to-host synchronisations per iteration, counted by the
launch layer, the tape and Taichi's host-facing calls; a fit's counts are the measured integers, run after run, and
fit.json records them (`launches_per_iteration`, `host_syncs_per_iteration`).

The shape fit's figures below were measured on 2026-12-05 (cpu; the counts are the same on every backend: they
count calls, not time), after issue 29 item 3 cut them: no host sync outside every SYNC_EVERY-th iteration, 13
launches where there were 41-50."""
from __future__ import annotations

import json

import numpy as np
import taichi as ti

from engine import dispatch, launch as launch_module
from engine.host_costs import IterationCosts, count_host_costs

# one steady iteration of ShapeFit("spot", subdiv=2) (ShapeFit.step): the tape's one launch zeroing every gradient,
# the source tree's vertex copy and refit, the two searches (in place: no gathers or scatters; the target search's
# Morton order kept between re-sorts), the slot index, the taped Chamfer total and the weighted sum, the seed of
# d loss, their two adjoints, Adam, the smoothing step: 13 kernels, no data op; no host sync. Every SYNC_EVERY-th
# step also reads the losses: 1 Taichi call (`to_numpy` of the loss history) and 1 sync. When issue 29 was filed an
# iteration was 41 launches at subdivision 2 and 46 at 4 (45 and 50 before this cut), with a sync every iteration.
FIT_LAUNCHES, FIT_KERNELS, FIT_SYNCS = 13, 13, 0
FILED_LAUNCHES = {2: 41, 4: 46}  # issue 29's goal: at most a third of these


def _read_line() -> int:
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "app" / "scenes" / "shape_fit.py").read_text().splitlines()
    return 1 + next(i for i, line in enumerate(lines) if "self.loss.history.to_numpy()" in line)


READ_SYNC_SITES = {f"app/scenes/shape_fit.py:{_read_line()} field.to_numpy": 1}


def _fit_counts(iterations: int, subdiv: int = 2) -> tuple[list[tuple[int, int, int]], list]:
    from app.scenes.shape_fit import ShapeFit

    fit = ShapeFit("spot", subdiv=subdiv)
    try:
        rows, sites = [], []
        for _ in range(iterations):
            with count_host_costs() as costs:
                fit.step()
            rows.append((costs.launches, costs.kernels, costs.host_syncs))
            sites.append(dict(costs.sync_sites))
        return rows, sites
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
    from app.scenes.fit_settings import SYNC_EVERY

    (first, sites), (second, _) = _fit_counts(2 * SYNC_EVERY + 2), _fit_counts(2 * SYNC_EVERY + 2)
    assert first == second  # stable: the same counts, iteration by iteration, in a fresh fit
    assert first[0][0] > FIT_LAUNCHES  # the first iteration uploads the target and builds the BVH's buffers
    for i, row in enumerate(first[1:], start=1):
        if (i + 1) % SYNC_EVERY:  # an iteration queues launches and waits for nothing
            assert row == (FIT_LAUNCHES, FIT_KERNELS, 0), i
        else:  # every SYNC_EVERY-th reads the losses of the last SYNC_EVERY in one wait
            assert row == (FIT_LAUNCHES + 1, FIT_KERNELS, 1) and sites[i] == READ_SYNC_SITES, i


def test_a_fit_iteration_launches_a_third_of_what_it_did_when_issue_29_was_filed(ti_cpu):
    for subdiv, filed in FILED_LAUNCHES.items():
        rows, _ = _fit_counts(3, subdiv)
        assert rows[1:] == [(FIT_LAUNCHES, FIT_KERNELS, 0)] * 2 and FIT_LAUNCHES <= filed / 3, subdiv


def test_fit_json_records_the_counts(ti_cpu, tmp_path):
    from app.scenes.fit_run import run_fit
    from app.scenes.fit_settings import FitSettings

    result = run_fit(FitSettings("spot", subdiv=2, iterations=12, arch="cpu"), tmp_path / "fit")
    record = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert record["launches_per_iteration"] == FIT_LAUNCHES and record["host_syncs_per_iteration"] == FIT_SYNCS
    costs = record["host_costs"]
    assert costs["iterations_counted"] == 11  # the first 10, then every 10th: 0-9 and 10
    # iteration 0 sets up; 9 reads the losses of 0-9 (sync_every 10)
    assert costs["launches"] == {str(FIT_LAUNCHES): 9, str(FIT_LAUNCHES + 1): 1, "45": 1}
    assert costs["host_syncs"] == {"0": 9, "1": 1, "7": 1}
    assert costs["typical_iteration"]["sync_sites"] == {}
    assert result.record["launches_per_iteration"] == FIT_LAUNCHES and record["sync_every"] == 10
    assert len(record["losses"]) == 12  # the last two read after the loop
    FitSettings.from_record(record)  # `fit --config fit.json` still reads it


def test_iteration_costs_counts_the_first_then_every_kth():
    costs = IterationCosts(first=2, every=5)
    for i in range(12):
        with costs.iteration(i):
            pass
    assert sum(costs.launches.values()) == 4  # 0, 1, 5, 10
    assert costs.record()["launches_per_iteration"] == 0 and costs.record()["host_syncs_per_iteration"] == 0
