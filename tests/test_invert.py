"""`python -m app invert`: bad input is one error line and exit 2; a run from a user PNG writes its outputs;
perturbations and parameter flags."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from engine import scene_theta
from engine.errors import UserError
from tests.test_batch import ROOT, TIMEOUT, assert_none_left, needs_ray, rows_of, run_batch


def _invert(*flags: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "invert", *flags], capture_output=True, text=True,
                          timeout=timeout)


def _one_error_line(result: subprocess.CompletedProcess, words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr


@pytest.mark.parametrize("flags,words", [
    (["--perturb", "elbows=20"], "unknown group 'elbows'"),
    (["--perturb", "joints=big"], "GROUP=NUMBER"),
    (["--set", "yaw"], "NAME=NUMBER"),
    (["--set", "knee=3"], "unknown parameter 'knee'"),
    (["--optimise", "joints,wings"], "wings"),
    (["--width", "1024", "--height", "512"], "up to 512x256"),
    (["--t", "2"], "--t 2"),
    (["--levels", "9"], "--levels 9"),
    (["--lr", "-1"], "--lr"),
    (["--iters", "x"], "invalid int"),
    (["--starts", "0"], "--starts"),
])
def test_bad_flags_are_one_error_line(flags, words):
    _one_error_line(_invert(*flags, "--arch", "cpu"), words)


def test_a_bad_target_image_is_one_error_line(tmp_path):
    missing = tmp_path / "none.png"
    _one_error_line(_invert("--target-image", str(missing), "--arch", "cpu"), "no such file")
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    _one_error_line(_invert("--target-image", str(text), "--arch", "cpu"), "not a readable image")
    small = tmp_path / "small.png"
    Image.fromarray(np.zeros((10, 20, 3), np.uint8)).save(small)
    _one_error_line(_invert("--target-image", str(small), "--width", "64", "--height", "32", "--arch", "cpu"),
                    "is 20x10; the view is 64x32")


@pytest.mark.slow
def test_invert_from_a_png_the_forward_renderer_wrote(tmp_path):
    """The user's path: `render` writes a PNG, `invert` fits it (a few steps here, so it does not converge and
    says so with exit 1: the recovery itself is measured by the pose_recovery claim and `bench invert_sweep`)."""
    render = subprocess.run([sys.executable, "-m", "app", "render", "--t", "0.1", "--width", "64", "--height", "32",
                             "--arch", "cpu", "--out", str(tmp_path / "render")], capture_output=True, text=True,
                            timeout=900)
    assert render.returncode == 0, render.stderr
    out = tmp_path / "invert"
    result = _invert("--target-image", str(tmp_path / "render" / "frame.png"), "--t", "0.1", "--width", "64",
                     "--height", "32", "--method", "adam", "--iters", "6", "--starts", "1", "--lm-iters", "0", "--hops",
                     "0", "--check-every", "3", "--frame-every", "3", "--arch", "cpu", "--out", str(out))
    assert result.returncode == 1, result.stderr
    record = json.loads((out / "invert.json").read_text())
    assert record["arch"] == "cpu" and record["steps"] == 6 and len(record["losses"]) == 6
    assert record["adam"] == {"iterations": 6, "discarded_gradients": 0}
    assert record["status"] == "not_converged" and "truth_criterion" not in record["verdict"]  # a picture: its residual
    assert record["verdict"]["decided_by"].startswith("image")
    assert record["settings"]["compare"] == "forward"  # a PNG is matched through the renderer that wrote it
    assert "was not written by `python -m app render --edges soft`" in result.stderr
    assert set(record["parameters"]) == set(scene_theta.NAMES)
    assert record["parameters"]["yaw"]["start"] != record["parameters"]["yaw"]["true"]
    assert all(np.isfinite(record["losses"])) and record["image_loss"]["start"] > 0.0
    assert sorted(p.name for p in (out / "frames").iterdir()) == ["iter_00000.png", "iter_00003.png",
                                                                 "iter_00006.png"]
    assert Image.open(out / "frames" / "iter_00006.png").size == (3 * 64, 32 + 26)  # target | current | difference
    assert (out / "progress.gif").stat().st_size > 0 and (out / "loss.png").stat().st_size > 0
    # what each step cost the host (engine.host_costs), per kind of step; the per-iteration figures are Adam's here:
    # an iteration queues launches and waits for nothing (issue 29), but for every --check-every-th (3 and 6), which
    # reads the last 3 iterations in one wait and checks the image loss, and the first, which sets up (the target,
    # the start, the optimiser's mask and limits uploaded)
    adam = record["host_costs"]["Adam"]
    assert set(record["host_costs"]) == {"Adam"} and adam["iterations_counted"] == 6 and adam["counted"] == "every step"
    typical = adam["typical_iteration"]
    assert record["launches_per_iteration"] == adam["launches_per_step"] == typical["kernels"] + typical["data_ops"] > 0
    assert record["host_syncs_per_iteration"] == adam["host_syncs_per_step"] == 0 and typical["sync_sites"] == {}
    assert adam["host_syncs"]["0"] == 3 and sum(adam["host_syncs"].values()) == 6


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["cpu", "vulkan"])
def test_invert_from_a_soft_edged_png_compares_the_differentiable_image(tmp_path, arch):
    """`render --edges soft` writes the differentiable render's image and says so in the PNG; `invert --compare auto`
    then compares the differentiable image, so at the true pose the loss is the PNG's 8-bit rounding alone
    (the forward renderer's hard edges against it leave 1e-3: docs/RESULTS.md)."""
    render = subprocess.run([sys.executable, "-m", "app", "render", "--edges", "soft", "--t", "0.1", "--width", "64",
                             "--height", "32", "--arch", arch, "--out", str(tmp_path / "render")],
                            capture_output=True, text=True, timeout=900)
    assert render.returncode == 0, render.stderr
    png = tmp_path / "render" / "frame.png"
    assert Image.open(png).text["shannon-autograd edges"].startswith("soft:")
    assert json.loads((tmp_path / "render" / "render.json").read_text())["edges"] == "soft"
    at_truth = ["--t", "0.1", "--width", "64", "--height", "32", "--perturb", "joints=0", "--optimise", "joints",
                "--method", "adam", "--iters", "1", "--arch", arch]
    records, codes = {}, {}
    for compare in ("auto", "forward"):
        out = tmp_path / compare
        result = _invert("--target-image", str(png), "--compare", compare, *at_truth, "--lm-iters", "1", "--starts",
                         "1", "--hops", "0", "--out", str(out))
        codes[compare] = result.returncode
        records[compare] = json.loads((out / "invert.json").read_text())
    assert records["auto"]["settings"]["compare"] == "diff"
    floor = records["auto"]["image_loss"]["start"]  # the start is the truth: only the PNG's rounding is left
    assert 0.0 < floor < 1e-5, floor
    # the verdict from the picture alone: the rounding's bound explains the residual at the truth ...
    noise = records["auto"]["verdict"]["image_criterion"]["target_noise"]
    assert floor <= noise and records["auto"]["status"] == "converged" and codes["auto"] == 0
    # ... and not hard edges against soft ones
    assert records["forward"]["image_loss"]["start"] > 100 * floor
    assert records["forward"]["status"] == "not_converged" and codes["forward"] == 1


def test_perturbation_is_seeded_and_at_least_three_quarters_of_its_magnitude():
    theta = np.linspace(0.1, 1.0, len(scene_theta.NAMES))
    a = scene_theta.perturb(theta, scene_theta.DEFAULT_PERTURB, seed=4)
    assert np.array_equal(a, scene_theta.perturb(theta, scene_theta.DEFAULT_PERTURB, seed=4))
    assert not np.array_equal(a, scene_theta.perturb(theta, scene_theta.DEFAULT_PERTURB, seed=5))
    moved = np.degrees(np.abs(a - theta)[scene_theta.GROUPS["joints"]])
    assert np.all((moved >= 15.0 - 1e-9) & (moved <= 20.0 + 1e-9))
    errors = scene_theta.group_errors(a, theta)
    assert 0.15 <= errors["letter"] <= 0.2 and errors["albedo"] <= 0.3 + 1e-9
    assert a[scene_theta.NAMES.index("tile_y")] == theta[scene_theta.NAMES.index("tile_y")]  # stays on the table
    untouched = scene_theta.perturb(theta, {"joints": 20.0}, seed=4)
    assert np.array_equal(untouched[scene_theta.GROUPS["letter"]], theta[scene_theta.GROUPS["letter"]])


def test_parameter_flags_parse_in_display_units():
    assert scene_theta.parse_perturb("joints=20, letter=0.2") == {"joints": 20.0, "letter": 0.2}
    assert scene_theta.parse_perturb("default") == scene_theta.DEFAULT_PERTURB
    settings = scene_theta.parse_settings("yaw=90,tile_x=-0.5")
    assert settings == {scene_theta.NAMES.index("yaw"): pytest.approx(np.pi / 2), scene_theta.NAMES.index("tile_x"): -0.5}
    with pytest.raises(UserError):
        scene_theta.parse_perturb("joints=-1")


# Here rather than in test_batch.py: by now the renderer's cpu kernels are in Taichi's offline cache (pytest runs
# test_batch.py first; tests/test_diff_render.py's worker and this file's runs compiled them). Taichi's cache key
# holds the CPU thread cap (TI_CPU_MAX_NUM_THREADS, which a batch task sets to its --cpus-per-task) besides the
# fields' SNode ids: 1-thread tasks compiled every kernel of the renderer again, cold, one copy in each of the two
# workers side by side (135 s of a cold suite). Tasks with Taichi's default thread count (this machine's CPUs, what
# a single run uses) load them instead; `--cpus` twice that keeps two jobs running at once.
@pytest.mark.slow
def test_batch_invert_rows_and_files_equal_single_inversions(tmp_path):
    """Two seeds through Ray, each job's invert.json equal to a single `python -m app invert` (wall time aside)."""
    needs_ray()
    tag = secrets.token_hex(4)
    flags = ["--method", "adam", "--iters", "3", "--lm-iters", "1", "--hops", "0", "--width", "64", "--height", "32",
             "--arch", "cpu"]
    out = tmp_path / "batch"
    threads = os.cpu_count() or 1  # Taichi's default cpu_max_num_threads
    result = run_batch(["invert", "--grid", "seed=1..2", *flags, "--cpus-per-task", str(threads), "--cpus",
                        str(2 * threads), "--out", str(out)], tag)
    assert result.returncode == 1, result.stderr[-3000:]  # no job converged in 3 steps
    rows = rows_of(out)
    assert sorted(rows) == ["seed1", "seed2"]  # 3 Adam steps: each row carries its run's verdict
    assert all(row["status"] == "not_converged" and "NOT CONVERGED" in row["error"] for row in rows.values())
    assert all(int(row["steps"]) >= 3 and float(row["orders"]) > 0 for row in rows.values())
    single = tmp_path / "single"
    done = subprocess.run([sys.executable, "-m", "app", "invert", "--seed", "2", *flags, "--out", str(single)],
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    batch_record = json.loads((out / "jobs" / "seed2" / "invert.json").read_text())
    single_record = json.loads((single / "invert.json").read_text())
    for record in (batch_record, single_record):
        record.pop("wall_s")
    assert batch_record == single_record
    assert {"invert.json", "loss.png", "progress.gif", "frames/iter_00000.png"} <= {
        str(p.relative_to(out / "jobs" / "seed2")) for p in (out / "jobs" / "seed2").rglob("*") if p.is_file()}
    assert_none_left(tag)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["cpu", "vulkan"])
def test_multi_start_fits_the_lowest_loss_start_and_one_start_is_the_single_fit(tmp_path, arch):
    """`--starts 3`: three short runs from the start with yaw moved 0, +15, -15 degrees; the Adam phase continues
    from the one whose short run ended lowest, with a fresh Adam (its first loss is that run's first, bit for bit).
    `--starts 1` runs no short run: its Adam phase is the first short run's (the fit of the seeded start alone)."""
    common = ["--seed", "5", "--width", "64", "--height", "32", "--method", "adam", "--iters", "2", "--lm-iters", "0",
              "--hops", "0", "--frame-every", "100", "--arch", arch]
    records = {}
    for starts in (3, 1):
        out = tmp_path / f"starts{starts}"
        result = _invert(*common, "--starts", str(starts), "--start-iters", "2", "--out", str(out))
        assert result.returncode == 1, result.stderr  # 2 + 2 steps do not recover the pose, and say so
        records[starts] = json.loads((out / "invert.json").read_text())
    multi, single = records[3]["multistart"], records[1]
    runs = multi["runs"]
    assert [run["yaw_offset_deg"] for run in runs] == [0.0, 15.0, -15.0]
    assert all(run["iterations"] == 2 for run in runs)
    losses = [run["image_loss"] for run in runs]
    assert len(set(losses)) == 3 and multi["picked"] == int(np.argmin(losses))
    assert multi["picked"] != 0  # seed 5's own start is not the best here: the pick moves the fit
    adam = records[3]["losses"][6:]  # after the three short runs of 2 steps
    assert records[3]["steps"] == 8 and adam[0] == records[3]["losses"][2 * multi["picked"]]  # the picked start
    assert single["multistart"] == {"starts": 1} and single["steps"] == 2
    assert single["losses"] == records[3]["losses"][:2]  # one start: the seeded start's fit, as the first short run
    assert single["image_loss"]["start"] == records[3]["image_loss"]["start"]
