"""The scene's one parameter table (engine.scene_layout.THETA) and what is derived from it: theta's names, groups
and slots, and the differentiable render's assumption that the SDF reads theta's leading N_GEOMETRIC components."""
from __future__ import annotations

import numpy as np
import pytest

from engine import scene_layout as layout
from engine import scene_theta


def test_names_groups_and_slots_come_from_the_one_table_geometric_components_first():
    assert scene_theta.NAMES == tuple(name for name, _, _ in layout.THETA) and len(scene_theta.NAMES) == layout.N_THETA
    for i, (name, group, _) in enumerate(layout.THETA):
        assert scene_theta.group_of(i) == group, name
    geometric = [g for _, _, g in layout.THETA]
    assert geometric == [True] * layout.N_GEOMETRIC + [False] * (layout.N_THETA - layout.N_GEOMETRIC)
    named = {"yaw": layout.T_YAW, "grip": layout.T_GRIP, "tile_x": layout.T_TILE_POS, "tile_tilt": layout.T_TILE_TILT,
             "paint_r": layout.T_PAINT, "letter_r": layout.T_LETTER, "sun_elevation": layout.T_SUN_ELEVATION}
    assert all(scene_theta.NAMES[i] == name for name, i in named.items())


@pytest.mark.slow  # compiles the SDF adjoint for a shared theta (a minute on 2 cores)
def test_the_scene_sdf_reads_every_geometric_component_and_no_other():
    """The SDF's parameter gradient (Taichi's adjoint of `raymarch_grad.sdf_samples`, the one differentiated SDF
    call site) summed over the surface points a render of t = 0.5 holds (the arm holding the tile: every part
    in view): non-zero for each geometric component, exactly zero for every other. A geometric parameter
    listed after the shading ones would fail the first half; the render keeps only N_GEO columns."""
    import taichi as ti

    from app.scenes.inverse_render import render_target, renderer
    from app.scenes.robot_arm import theta_at
    from engine import backend
    from engine.kernels import raymarch_grad

    backend.init("cpu")
    assert raymarch_grad.N_GEO == layout.N_GEOMETRIC
    theta = theta_at(0.5)
    render_target(theta, 128, 64)
    r = renderer()
    n = r.n_slots
    points_np = r.points.to_numpy()[:n]
    shared = ti.field(ti.f32, (layout.N_THETA,), needs_grad=True)
    points = ti.Vector.field(3, ti.f32, (n, raymarch_grad.N_SAMPLES), needs_grad=True)
    values = ti.field(ti.f32, (n, raymarch_grad.N_SAMPLES), needs_grad=True)
    shadow = ti.field(ti.f32, (n,))
    shared.from_numpy(theta.astype(np.float32))
    points.from_numpy(points_np)
    values.grad.fill(1.0)
    for j in range(raymarch_grad.S_SHADOW):  # the shaded point and its normal taps: on the surfaces in view
        raymarch_grad.sdf_samples.grad(shared, points, shadow, n, j, values)
    grad = shared.grad.to_numpy()
    geo = layout.N_GEOMETRIC
    assert np.all(np.abs(grad[:geo]) > 0.0), dict(zip(scene_theta.NAMES[:geo], grad[:geo]))
    assert np.all(grad[geo:] == 0.0), dict(zip(scene_theta.NAMES[geo:], grad[geo:]))
