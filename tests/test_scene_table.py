"""The scene's tables (engine.scene_layout.THETA, PACKED) and what is derived from them: theta's names, groups
and slots, the differentiable render's assumption that the SDF reads theta's leading N_GEOMETRIC components, and the
packed scene's offsets against the kernels' `Scene`."""
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


def test_the_packed_layout_is_the_table_and_fits_the_kernels_scene():
    """raymarch's P_* offsets are the PACKED table's running sums, without overlap or a slot past N_PARAMS, and each
    member of the kernels' `Scene` is as wide as its rows (the albedos' three RGB members share one row)."""
    from engine.kernels import raymarch

    starts = np.cumsum([0] + [width for _, width in layout.PACKED])
    assert starts[-1] == layout.N_PACKED == raymarch.N_PARAMS
    for (name, width), at in zip(layout.PACKED, starts[:-1]):
        if name != "spare":
            assert layout.PACKED_AT[name] == at, name
    offsets = {name: getattr(raymarch, f"P_{name.upper()}") for name, _ in layout.PACKED if name != "spare"}
    assert offsets == {name: layout.PACKED_AT[name] for name in offsets}
    widths = dict(layout.PACKED)
    members = {name: int(np.prod(getattr(dtype, "get_shape", lambda: ())() or (1,)))
               for name, dtype in raymarch.Scene.members.items()}
    assert members.pop("paint") + members.pop("tile") + members.pop("letter") == widths["albedo"]
    assert members == {name: widths[name] for name in members}


@pytest.mark.slow  # a taped render at 128x64
def test_the_scene_sdf_reads_every_geometric_component_and_no_other():
    """The SDF's parameter gradient at the surface points a taped render of t = 0.5 holds (the arm holding the
    tile: every part in view), from the renderer's own hold (`raymarch_grad.sdf_samples`' adjoint with unit seeds,
    the one differentiated SDF call site, its kernels as the renderer compiled them): the kept Jacobian
    (`keep_jacobian`, theta's first N_GEO columns) is non-zero for each geometric component somewhere, and what
    the adjoint left in the other columns is exactly zero. A geometric parameter listed after the shading ones
    would fail the first half."""
    from app.scenes.inverse_render import renderer
    from app.scenes.robot_arm import theta_at
    from engine import backend
    from engine.kernels import raymarch_grad
    from engine.render import Camera

    backend.init("cpu")
    assert raymarch_grad.N_GEO == layout.N_GEOMETRIC
    r = renderer()
    r.set_view(Camera(), 128, 64)
    r.set_loss("l2", 1, 1.0)
    r.set_theta(theta_at(0.5))
    r.tape.reset()
    r.theta_slots.grad.fill(0.0)
    with r.tape:
        r.record()  # the hold runs as it is recorded: the SDF's adjoint at every held point
    n = r.n_slots
    jacobian = r.jacobian.to_numpy()[:n]  # (slots, samples, N_GEO)
    rest = r.theta_slots.grad.to_numpy()[:n, layout.N_GEOMETRIC:]
    r.tape.reset()
    geo = layout.N_GEOMETRIC
    assert jacobian.shape[-1] == geo
    seen = np.abs(jacobian).max(axis=(0, 1))
    assert np.all(seen > 0.0), dict(zip(scene_theta.NAMES[:geo], seen))
    assert np.all(rest == 0.0), dict(zip(scene_theta.NAMES[geo:], np.abs(rest).max(axis=0)))
