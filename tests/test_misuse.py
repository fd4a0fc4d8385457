"""Misuse, table-driven: every bad input, output, signal and environment a user can throw at the command line.

For each case: the exit code (engine.errors: 1 result bad, 2 bad input or machine, 3 internal
error, 130 interrupted), exactly one stderr line starting with `error:` that names the problem
(for exit code 1: no such line, and the documented result line on stdout instead), no traceback,
and what is on disk afterwards (nothing half-written, nothing of another run, an interrupted
run's files present and marked).

Most cases must fail before any backend starts (`python -m app` checks every flag, file and
output folder first): they run in this process through `app.cli.main` with `engine.backend.init`
and the window replaced by tripwires, so a case that got as far as starting a backend fails.
The few that need a backend, a signal or a second process run `python -m app` as a subprocess
at tiny sizes (subdivision 1, 64x32 pixels). Full disks are real: a file-size limit (`ulimit -f`)
always, and a small tmpfs filled during the run where this machine lets us mount one.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app import cli
from engine import backend, output_dir
from engine.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
DIR = object()  # a fixture that is a folder, not a file
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
TRI = "v 0 0 0\nv 1 0 0\nv 0 1 0\n"
FIXTURES = {  # name -> content, created in the case's folder before it runs
    "empty.obj": b"",
    "folder.obj": DIR,
    "image.obj": PNG,
    "zero.obj": TRI + "f 0 1 2\n",
    "nine.obj": TRI + "f 1 2 9\n",
    "points.obj": TRI,
    "huge.obj": "v 1e308 0 0\nv -1e308 0 0\nv 0 1 0\nf 1 2 3\n",
    "nan.obj": "v nan 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
    "flat.obj": "v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\n",
    "mesh.xyz": "0 0 0\n",
    "junk.ply": b"ply\nformat binary_little_endian 1.0\nelement vertex 9\nproperty float x\nend_header\n\x01\x02",
    "a_file": "not a folder\n",
    "bad.json": "{not json",
    "notarget.json": "{}",
    "ok.obj": TRI + "f 1 2 3\n",
    # fit --config: each setting of a fit.json checked as strictly as its flag
    "cfg-iters-bool.json": '{"target": "blob", "iterations": true}',
    "cfg-iters-float.json": '{"target": "blob", "iterations": 2.5}',
    "cfg-subdiv-high.json": '{"target": "blob", "subdiv": 9}',
    "cfg-seed-float.json": '{"target": "blob", "seed": 1e30}',
    "cfg-target-dict.json": '{"target": {"path": "ok.obj"}}',
    "cfg-lr-string.json": '{"target": "blob", "lr": "0.1"}',
    "cfg-lr-nan.json": '{"target": "blob", "lr": NaN}',
    "cfg-smooth-bool.json": '{"target": "blob", "smooth": false}',
    "cfg-video-string.json": '{"target": "blob", "video": "yes"}',
    "cfg-format-list.json": '{"target": "blob", "mesh_format": ["obj"]}',
    "cfg-samples-zero.json": '{"target": "blob", "samples": 0}',
    "cfg-arch-number.json": '{"target": "blob", "backend": {"requested": 3}}',
    "cfg-misspelt.json": '{"target": "blob", "iters": 5}',
    "cfg-weights-unknown.json": '{"target": "blob", "weights": {"chamfer": 1, "edges": 0.1}}',
    "cfg-weights-negative.json": '{"target": "blob", "weights": {"edge": -1}}',
}
NO_GPU = backend.cuda_unavailable_reason() is not None

# (id, argv, exit code, words the error line must contain, environment: name -> value or None to unset)
CASES = [
    # fit: flags
    ("fit-no-target", ["fit"], 2, "required: --target", {}),
    ("fit-unknown-target", ["fit", "--target", "nosuch"], 2, "unknown target 'nosuch'", {}),
    ("fit-subdiv-high", ["fit", "--target", "blob", "--subdiv", "6"], 2, "--subdiv must be an integer in 0..5", {}),
    ("fit-subdiv-negative", ["fit", "--target", "blob", "--subdiv", "-1"], 2, "--subdiv must be an integer", {}),
    ("fit-subdiv-word", ["fit", "--target", "blob", "--subdiv", "abc"], 2, "--subdiv: invalid int value: 'abc'", {}),
    ("fit-iters-zero", ["fit", "--target", "blob", "--iters", "0"], 2, "--iters must be an integer in 1..", {}),
    ("fit-iters-huge", ["fit", "--target", "blob", "--iters", "2000000"], 2, "--iters must be an integer", {}),
    ("fit-lr-negative", ["fit", "--target", "blob", "--lr", "-1"], 2, "--lr must be a positive number", {}),
    ("fit-lr-zero", ["fit", "--target", "blob", "--lr", "0"], 2, "--lr must be a positive number", {}),
    ("fit-lr-nan", ["fit", "--target", "blob", "--lr", "nan"], 2, "--lr must be a positive number, got nan", {}),
    ("fit-lr-inf", ["fit", "--target", "blob", "--lr", "inf"], 2, "--lr must be a positive number, got inf", {}),
    ("fit-smooth-high", ["fit", "--target", "blob", "--smooth", "1.5"], 2, "--smooth must be in 0..1", {}),
    ("fit-smooth-nan", ["fit", "--target", "blob", "--smooth", "nan"], 2, "--smooth must be in 0..1", {}),
    ("fit-smooth-end-negative", ["fit", "--target", "blob", "--smooth-end", "-0.1"], 2, "--smooth-end must be in", {}),
    ("fit-seed-negative", ["fit", "--target", "blob", "--seed", "-1"], 2, "--seed must be an integer in 0..", {}),
    ("fit-seed-huge", ["fit", "--target", "blob", "--seed", str(2**32)], 2, "--seed must be an integer", {}),
    ("fit-samples-zero", ["fit", "--target", "blob", "--samples", "0"], 2, "--samples must be an integer", {}),
    ("fit-samples-huge", ["fit", "--target", "blob", "--samples", "100000000"], 2, "--samples must be an integer", {}),
    ("fit-dump-negative", ["fit", "--target", "blob", "--dump-every", "-1"], 2, "--dump-every must be an integer", {}),
    ("fit-edge-weight-negative", ["fit", "--target", "blob", "--edge-weight", "-1"], 2,
     "--edge-weight must be a number >= 0, got -1.0", {}),
    ("fit-weights-all-zero", ["fit", "--target", "blob", "--chamfer-weight", "0"], 2, "every loss weight is 0", {}),
    ("fit-mesh-format", ["fit", "--target", "blob", "--mesh-format", "fbx"], 2, "--mesh-format: invalid choice", {}),
    ("fit-arch-unknown", ["fit", "--target", "blob", "--arch", "metal"], 2, "unknown backend 'metal' (from --arch)", {}),
    ("fit-unknown-flag", ["fit", "--target", "blob", "--learning-rate", "1"], 2, "unrecognized arguments", {}),
    ("fit-abbreviated-flag", ["fit", "--targ", "blob"], 2, "unrecognized arguments: --targ", {}),
    ("fit-flags-before-command", ["--arch", "cpu", "fit", "--target", "blob"], 2, "put the command first", {}),
    # fit: bad files
    ("mesh-missing", ["fit", "--target", "missing.obj"], 2, "mesh file missing.obj: not found", {}),
    ("mesh-empty", ["fit", "--target", "empty.obj"], 2, "empty.obj: the file is empty", {}),
    ("mesh-folder", ["fit", "--target", "folder.obj"], 2, "folder.obj: not a file", {}),
    ("mesh-png", ["fit", "--target", "image.obj"], 2, "image.obj: not a mesh (a PNG image)", {}),
    ("mesh-index-zero", ["fit", "--target", "zero.obj"], 2, "uses vertex 0, but only 3 vertices", {}),
    ("mesh-index-too-big", ["fit", "--target", "nine.obj"], 2, "uses vertex 9, but only 3 vertices", {}),
    ("mesh-no-faces", ["fit", "--target", "points.obj"], 2, "a point cloud of 3 points with no faces", {}),
    ("mesh-huge-coordinates", ["fit", "--target", "huge.obj"], 2, "coordinates up to 1e+308 are too large", {}),
    ("mesh-nan-coordinates", ["fit", "--target", "nan.obj"], 2, "1 vertices have NaN or infinite coordinates", {}),
    ("mesh-degenerate", ["fit", "--target", "flat.obj"], 2, "every face is degenerate", {}),
    ("mesh-unsupported", ["fit", "--target", "mesh.xyz"], 2, "unsupported format '.xyz'", {}),
    ("mesh-corrupt-ply", ["fit", "--target", "junk.ply"], 2, "junk.ply: could not be read as PLY", {}),
    ("config-missing", ["fit", "--config", "missing.json"], 2, "--config missing.json: cannot be read", {}),
    ("config-not-json", ["fit", "--config", "bad.json"], 2, "--config bad.json: not JSON", {}),
    ("config-not-a-fit", ["fit", "--config", "notarget.json"], 2, "not a fit.json (no \"target\")", {}),
    *[(f"config-{name[4:-5]}", ["fit", "--config", name], 2, f"--config {name}: {words}", {}) for name, words in (
        ("cfg-iters-bool.json", '"iterations" must be an integer in 1..1,000,000 (as --iters), got true (a boolean)'),
        ("cfg-iters-float.json", '"iterations" must be an integer in 1..1,000,000 (as --iters), got 2.5 (a number)'),
        ("cfg-subdiv-high.json", '"subdiv" must be an integer in 0..5 (as --subdiv), got 9 (an integer)'),
        ("cfg-seed-float.json", '"seed" must be an integer in 0..4,294,967,295 (as --seed), got 1e+30 (a number)'),
        ("cfg-target-dict.json", '"target" must be a built-in target\'s name or a mesh file\'s path (a non-empty '
                                 'string) (as --target), got {"path": "ok.obj"} (an object)'),
        ("cfg-lr-string.json", '"lr" must be a positive number (as --lr), got "0.1" (a string)'),
        ("cfg-lr-nan.json", '"lr" must be a positive number (as --lr), got NaN (a number)'),
        ("cfg-smooth-bool.json", '"smooth" must be a number in 0..1 (as --smooth), got false (a boolean)'),
        ("cfg-video-string.json", '"video" must be true or false (as --video), got "yes" (a string)'),
        ("cfg-format-list.json", '"mesh_format" must be one of obj, ply, stl, glb (as --mesh-format), got ["obj"]'),
        ("cfg-samples-zero.json", '"samples" must be an integer in 1..10,000,000 or null (as --samples), got 0'),
        ("cfg-arch-number.json", '"backend" must be an object whose "requested" is one of auto, cuda, vulkan, cpu'),
        ("cfg-misspelt.json", '"iters" is not a field of a fit.json (did you mean "iterations"?)'),
        ("cfg-weights-unknown.json", '"weights" must be an object of loss weights (numbers >= 0) named chamfer, edge '
                                     '(as --chamfer-weight, --edge-weight), got {"chamfer": 1, "edges": 0.1}'),
        ("cfg-weights-negative.json", '"weights" must be an object of loss weights'))],
    # fit: outputs
    ("fit-out-proc", ["fit", "--target", "blob", "--out", "/proc/x"], 2, "--out /proc/x: cannot create the folder", {}),
    ("fit-out-unwritable", ["fit", "--target", "blob", "--out", "/proc"], 2, "--out /proc: the folder is not writable", {}),
    ("fit-out-is-a-file", ["fit", "--target", "blob", "--out", "a_file"], 2, "--out a_file: exists and is not a folder", {}),
    ("fit-out-under-a-file", ["fit", "--target", "blob", "--out", "a_file/sub"], 2, "a_file is not a folder", {}),
    # fit: environment
    ("fit-env-ti-arch", ["fit", "--target", "blob"], 2, "TI_ARCH=cuda is set in the environment", {"TI_ARCH": "cuda"}),
    ("fit-env-shannon-arch", ["fit", "--target", "blob"], 2, "unknown backend 'metal' (from SHANNON_ARCH)",
     {"SHANNON_ARCH": "metal"}),
    # render
    ("render-width-zero", ["render", "--width", "0"], 2, "width 0 is out of range", {}),
    ("render-height-negative", ["render", "--height", "-1"], 2, "height -1 is out of range", {}),
    ("render-width-huge", ["render", "--width", "20000"], 2, "width 20000 is out of range", {}),
    ("render-width-word", ["render", "--width", "wide"], 2, "--width: invalid int value", {}),
    ("render-t-outside", ["render", "--t", "1.5"], 2, "--t 1.5 is out of range", {}),
    ("render-t-nan", ["render", "--t", "nan"], 2, "--t nan is not a finite number", {}),
    ("render-azimuth-nan", ["render", "--azimuth", "nan"], 2, "--azimuth nan is not a finite number", {}),
    ("render-azimuth-inf", ["render", "--azimuth", "inf"], 2, "--azimuth inf is not a finite number", {}),
    ("render-elevation-90", ["render", "--elevation", "90"], 2, "--elevation 90 is out of range", {}),
    ("render-distance-zero", ["render", "--distance", "0"], 2, "--distance 0 is out of range", {}),
    ("render-frames-negative", ["render", "--frames", "-1"], 2, "--frames -1 is out of range", {}),
    ("render-frames-huge", ["render", "--frames", "10001"], 2, "--frames 10001 is out of range", {}),
    ("render-fps-nan", ["render", "--frames", "2", "--fps", "nan"], 2, "--fps nan is not a finite number", {}),
    ("render-fps-zero", ["render", "--frames", "2", "--fps", "0"], 2, "--fps 0 is out of range", {}),
    ("render-fps-huge", ["render", "--frames", "2", "--fps", "1000"], 2, "--fps 1000 is out of range", {}),
    ("render-video-format", ["render", "--frames", "2", "--video", "avi"], 2, "--video 'avi'", {}),
    ("render-float-format", ["render", "--float", "tiff"], 2, "--float: invalid choice", {}),
    ("render-aov", ["render", "--aov", "some"], 2, "--aov: invalid choice", {}),
    ("render-animation-too-big", ["render", "--frames", "10000", "--width", "4096", "--height", "2048"], 2,
     "holds 234.4 GiB of frames", {}),
    ("render-aov-with-frames", ["render", "--frames", "3", "--aov", "all"], 2, "--aov all applies to a single frame",
     {}),
    ("render-float-with-frames", ["render", "--frames", "3", "--float", "npy"], 2, "--float applies to a single", {}),
    ("render-soft-too-big", ["render", "--edges", "soft"], 2, "--edges soft renders at up to 512x256", {}),
    ("render-soft-aov", ["render", "--edges", "soft", "--width", "64", "--height", "32", "--aov", "all"], 2,
     "leave it out with --edges soft", {}),
    ("render-out-is-a-file", ["render", "--out", "a_file"], 2, "--out a_file: exists and is not a folder", {}),
    ("render-env-ti-arch", ["render"], 2, "TI_ARCH=vulkan is set", {"TI_ARCH": "vulkan"}),
    # headless
    ("headless-only-empty", ["--headless", "--only", ","], 2, "--only ',' names no claim", {}),
    ("headless-only-unknown", ["--headless", "--only", "affine,nope"], 2, "unknown claim nope in --only", {}),
    ("headless-parity-unknown", ["--headless", "--parity-arch", "gpu"], 2, "unknown backend 'gpu' (from --parity-arch)",
     {}),
    ("headless-parity-auto", ["--headless", "--parity-arch", "auto"], 2, "--parity-arch must name a backend", {}),
    ("headless-out-proc", ["--headless", "--out", "/proc/x"], 2, "--out /proc/x: cannot create the folder", {}),
    ("headless-window-flag", ["--headless", "--frames", "3"], 2, "--frames only applies to the desktop app", {}),
    ("headless-env-ti-arch", ["--headless"], 2, "TI_ARCH=cpu is set in the environment", {"TI_ARCH": "cpu"}),
    ("headless-unknown-flag", ["--headless", "--fast"], 2, "unrecognized arguments: --fast", {}),
    # the desktop app's test hooks (all refused before a window opens)
    ("app-panel", ["--arch", "cpu", "--panel", "bogus"], 2, "--panel 'bogus'", {}),
    ("app-size", ["--arch", "cpu", "--size", "12x"], 2, "--size '12x'", {}),
    ("app-frames-zero", ["--arch", "cpu", "--frames", "0"], 2, "--frames 0", {}),
    ("app-frames-word", ["--arch", "cpu", "--frames", "many"], 2, "--frames: invalid int value", {}),
    ("app-screenshot-proc", ["--arch", "cpu", "--frames", "1", "--screenshot", "/proc/x/s.png"], 2,
     "--screenshot /proc/x/s.png: folder /proc/x: cannot create the folder", {}),
    ("app-screenshot-folder", ["--arch", "cpu", "--frames", "1", "--screenshot", "folder.obj"], 2,
     "--screenshot folder.obj: is a folder", {}),
    ("app-headless-flag", ["--arch", "cpu", "--out", "x"], 2, "--out only applies to --headless", {}),
    ("app-no-display", ["--arch", "cpu"], 2, "no display: use --headless or run under Xvfb",
     {"DISPLAY": None, "WAYLAND_DISPLAY": None}),
    ("app-bogus-display", ["--arch", "cpu"], 2, "cannot open DISPLAY=:987", {"DISPLAY": ":987", "WAYLAND_DISPLAY": None}),
    ("app-bogus-wayland", ["--arch", "cpu"], 2, "WAYLAND_DISPLAY=bogus-0 names no Wayland socket",
     {"DISPLAY": None, "WAYLAND_DISPLAY": "bogus-0"}),
    ("app-env-ti-arch", ["--arch", "cpu"], 2, "TI_ARCH=cuda is set", {"TI_ARCH": "cuda"}),
    ("app-parity-unknown", ["--parity-arch", "gpu"], 2, "unknown backend 'gpu' (from --parity-arch)", {}),
    ("bench-unknown", ["bench", "nope"], 2, "argument NAME: invalid choice: 'nope'", {}),
    ("bench-out-proc", ["bench", "launch", "--out", "/proc/x"], 2, "--out /proc/x: cannot create the folder", {}),
    ("bench-unknown-flag", ["bench", "launch", "--fast"], 2, "bench launch: unrecognized arguments: --fast", {}),
]
if NO_GPU:
    CASES += [
        ("fit-cuda-no-gpu", ["fit", "--target", "blob", "--arch", "cuda"], 2, "backend cuda is not available", {}),
        ("headless-cuda-no-gpu", ["--headless", "--arch", "cuda"], 2, "backend cuda is not available", {}),
        ("headless-parity-cuda-no-gpu", ["--headless", "--parity-arch", "cuda"], 2,
         "backend cuda is not available: ", {}),
        ("app-parity-cuda-no-gpu", ["--arch", "cpu", "--parity-arch", "cuda"], 2, "(--parity-arch cuda)", {}),
    ]


class BackendStarted(BaseException):
    """A case meant to fail before any backend starts got as far as starting one (or opening a window)."""


def _tripwire(*args, **kwargs):
    raise BackendStarted(f"started with {args} {kwargs}")


def make_fixtures(folder: Path) -> None:
    for name, content in FIXTURES.items():
        path = folder / name
        if content is DIR:
            path.mkdir()
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_one_error_line(code: int, out: str, err: str, expected_code: int, words: str) -> str:
    """The exit code, one `error:` line with `words` (exit 1: none, and `words` on stdout's last line), no traceback."""
    assert code == expected_code, (code, out, err)
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if expected_code == 1:
        assert errors == [] and words in out.strip().splitlines()[-1], (out, err)
        return out.strip().splitlines()[-1]
    assert len(errors) == 1 and words in errors[0], err
    return errors[0]


@pytest.fixture
def inprocess(monkeypatch, capfd, tmp_path):
    """Run `python -m app ARGV` in this process, in a fresh folder, with a backend start or a window as tripwires."""
    from app.ui import app as ui_app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHANNON_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(backend, "init", _tripwire)
    monkeypatch.setattr(ui_app, "run_app", _tripwire)
    monkeypatch.setattr(ui_app, "_held_display", [])  # another test's checked display must not excuse a bad one

    def run(argv: list[str], env: dict) -> tuple[int, str, str]:
        for key, value in env.items():
            monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
        capfd.readouterr()
        code = cli.main(argv)
        out, err = capfd.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize("case_id, argv, code, words, env", CASES, ids=[case[0] for case in CASES])
def test_misuse_fails_in_one_line_before_any_backend_starts(inprocess, tmp_path, case_id, argv, code, words, env):
    make_fixtures(tmp_path)
    before = files_under(tmp_path)
    assert_one_error_line(*inprocess(argv, env), code, words)
    assert files_under(tmp_path) == before, "a refused run wrote or removed files"


def test_a_config_is_checked_field_by_field_like_the_flags():
    """Every FitSettings field has its check in fit.json; a valid value of each passes, and null only where allowed."""
    from dataclasses import fields

    from app.scenes.fit_settings import RECORD_SETTINGS, FitSettings

    assert set(RECORD_SETTINGS) == {field.name for field in fields(FitSettings)}
    record = {"target": "blob", "subdiv": 0, "iterations": 1_000_000, "lr": 1, "smooth": 0, "smooth_end": None,
              "samples": None, "seed": 2**32 - 1, "dump_every": 0, "mesh_format": "glb", "video": True, "arch": "cpu",
              "status": "ok", "losses": [1.0]}
    settings = FitSettings.from_record(record, "c.json")
    assert (settings.iterations, settings.lr, settings.arch, settings.video) == (1_000_000, 1, "cpu", True)
    assert settings.validate() is settings
    for name in ("target", "subdiv", "iterations", "lr", "smooth", "seed", "dump_every", "mesh_format", "video"):
        with pytest.raises(UserError, match=f'^c.json: "{name}" must be .*, got null$'):
            FitSettings.from_record({**record, name: None}, "c.json")


def test_a_batch_job_folder_stays_inside_out_jobs_whatever_the_mesh_is_named(tmp_path):
    """A mesh named `...obj` has the stem `..`: its job folder was OUT/jobs/../default, i.e. OUT/default."""
    from app.batch import jobs as job_specs
    from app.batch import store

    meshes = tmp_path / "meshes"
    meshes.mkdir()
    names = ["...obj", "..obj", ".obj", "....obj", "a b.obj", "a_b.obj", "nl\n.obj", "back\\slash.obj", "é.obj",
             "-.obj", "x" * 200 + ".obj", "spot.obj"]
    for name in names:
        (meshes / name).write_text(FIXTURES["ok.obj"])
    targets = job_specs.find_targets([str(meshes), str(meshes / ".obj")])  # `.obj` has no suffix: given as a file
    assert len(targets) == len(names)
    jobs = job_specs.fit_jobs(targets, job_specs.parse_grid(["seed=0,1"]), base={}, arch="cpu", threads=1)
    out = tmp_path / "out"
    folders = [store.job_folder(out, job) for job in jobs]
    assert len(set(folders)) == len(jobs) == 2 * len(names), "every job has its own folder"
    for job, folder in zip(jobs, folders):
        assert folder.resolve().is_relative_to((out / "jobs").resolve()), job.name
        label = folder.relative_to(out / "jobs").parts[0]
        assert not label.startswith(".") and len(label) <= job_specs.MAX_LABEL + 7, job.name
        assert all(c.isascii() and (c.isalnum() or c in "+-_.") for c in label), job.name
    assert {job.name for job in jobs if job.settings["target"].endswith("spot.obj")} == {"spot/seed0", "spot/seed1"}
    for bad in ("../x", "a/../../x", ".hidden/x", "/abs/x", ""):
        with pytest.raises(ValueError, match="outside"):
            store.job_folder(out, job_specs.Job("fit", bad))


def test_only_the_files_a_run_recorded_writing_are_cleared_never_through_a_symlink(tmp_path):
    """engine.output_dir in temporary folders: what the earlier run wrote goes, everything else stays."""
    from engine import atomic

    folder, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "iter_00000.obj").write_text("the user's, in another folder\n")
    folder.mkdir()
    (folder / "frames").symlink_to(elsewhere)  # the reported case: OUT/frames a symlink to another folder
    patterns = ("fit.json", "final.*", "frames/iter_*.*")
    with output_dir.claim(folder, "fit", patterns) as claimed:
        atomic.write_text(folder / "fit.json", "{}")
        atomic.write_text(folder / "sub" / "final.obj", "ours\n")
        atomic.write_text(folder / "frames" / "iter_00001.obj", "ours, but through the symlink\n")
        atomic.write_text(tmp_path / "beside.txt", "not in the folder\n")
        assert claimed.note(folder / "frames" / "iter_00001.obj") is False
    recorded = [json.loads(line)["file"] for line in (folder / output_dir.MANIFEST).read_text().splitlines()[1:]]
    assert recorded == ["fit.json", "sub/final.obj"], "nothing written through a symlink or outside is recorded"
    with open(folder / output_dir.MANIFEST, "a") as manifest:  # forged or damaged lines
        manifest.write(_manifest_entry(folder, "frames/iter_00000.obj") + "\n")  # exact identity, via the link
        manifest.write(_manifest_entry(folder, "../beside.txt") + "\n")
        manifest.write('{"file": "fit.json", "size": 2, "mtime_ns": "x"}\n{"file": "cut sh')  # a killed writer's
    with output_dir.claim(folder, "fit", patterns):
        pass
    assert sorted(p.name for p in folder.iterdir()) == [output_dir.MANIFEST, "frames"], "fit.json, sub/ removed"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["iter_00000.obj", "iter_00001.obj"]
    assert (tmp_path / "beside.txt").is_file()
    # a manifest of an older version (or written by hand) that lists patterns deletes nothing
    (folder / "notes.txt").write_text("mine\n")
    (folder / "fit.json").write_text("mine too\n")
    (folder / output_dir.MANIFEST).write_text(json.dumps({"pid": 1, "command": "render",
                                                          "patterns": ["*", "*.txt", "fit.json"]}, indent=2))
    with output_dir.claim(folder, "fit", patterns):
        pass
    assert (folder / "notes.txt").read_text() == "mine\n" and (folder / "fit.json").read_text() == "mine too\n"
    # folders claimed inside one another (a claim that runs a fit into a subfolder): the inner one records its files
    with output_dir.claim(tmp_path / "outer", "--headless", ()), output_dir.claim(tmp_path / "outer" / "fit", "fit", ()):
        atomic.write_text(tmp_path / "outer" / "fit" / "fit.json", "{}")
        atomic.write_text(tmp_path / "outer" / "report.json", "{}")
    for name, recorded in (("outer", ["report.json"]), ("outer/fit", ["fit.json"])):
        lines = (tmp_path / name / output_dir.MANIFEST).read_text().splitlines()[1:]
        assert [json.loads(line)["file"] for line in lines] == recorded


def test_there_are_at_least_60_misuse_cases():
    assert len(CASES) + len(SUBPROCESS_CASES) >= 60


# --- cases that need a backend, a signal, a second process or another user's rights ---------------------------

def app_process(*args: str, cwd: Path, env: dict | None = None, preexec=None, prefix: tuple = (),
                **popen) -> subprocess.Popen:
    environment = {**os.environ, "SHANNON_LOG_DIR": str(cwd / "logs"), **(env or {})}
    return subprocess.Popen([*prefix, sys.executable, "-m", "app", *args], cwd=cwd, env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec, **popen)


def run_app(*args: str, cwd: Path, timeout: float = 300, **kwargs) -> tuple[int, str, str]:
    process = app_process(*args, cwd=cwd, **kwargs)
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def without_file_permissions() -> tuple:
    """A command prefix under which even root obeys file permission bits (or nothing, when not root)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without util-linux setpriv to drop the file-permission override")
    return ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


def no_temporary_files(folder: Path) -> None:
    leftovers = [p for p in folder.rglob(".*") if p.name != output_dir.MANIFEST]
    assert leftovers == [], f"temporary files left: {leftovers}"


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


TINY_FIT = ("fit", "--target", "blob", "--subdiv", "1", "--samples", "200", "--arch", "cpu")


def case_unreadable_mesh(tmp_path):
    secret = tmp_path / "secret.obj"
    secret.write_text(FIXTURES["ok.obj"])
    secret.chmod(0)
    code, out, err = run_app("fit", "--target", str(secret), cwd=tmp_path, prefix=without_file_permissions())
    assert_one_error_line(code, out, err, 2, "secret.obj: cannot be read (Permission denied)")
    assert not (tmp_path / "out").exists()


def case_read_only_out(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    code, out, err = run_app(*TINY_FIT, "--out", str(folder), cwd=tmp_path, prefix=without_file_permissions())
    assert_one_error_line(code, out, err, 2, "the folder is not writable (Permission denied)")
    assert list(folder.iterdir()) == []


def case_fit_diverges(tmp_path):
    code, out, err = run_app(*TINY_FIT, "--iters", "30", "--lr", "1e6", "--out", "out", cwd=tmp_path)
    line = assert_one_error_line(code, out, err, 1, "FIT DIVERGED at iteration 1: the loss grew to")
    record = json.loads((tmp_path / "out" / "fit.json").read_text())
    assert record["status"] == "diverged" and record["diverged"] is True and record["diverged_at"] == 1, line
    # the losses are read (and checked) every --sync-every (10) iterations: the run stops at the first read after
    # the growth, the iteration named is the one where the loss grew
    assert record["iterations_done"] == record["sync_every"] == 10 and record["losses"][1] > 100 * record["losses"][0]
    assert {"final.obj", "loss.png", "loss.svg"} <= set(os.listdir(tmp_path / "out"))


def case_fit_ends_worse(tmp_path):
    code, out, err = run_app(*TINY_FIT, "--iters", "5", "--out", "out", cwd=tmp_path)
    assert_one_error_line(code, out, err, 1, "the loss ended above its first value")
    record = json.loads((tmp_path / "out" / "fit.json").read_text())
    assert record["diverged"] and record["final_loss"] > record["losses"][0] and record["iterations_done"] == 5
    assert all(loss > record["losses"][0] for loss in record["losses"][record["diverged_at"]:])


def _interrupt_fit(tmp_path, sig: signal.Signals) -> None:
    """A long fit holds its folder (a second run is refused naming its pid), then a signal stops it with its files."""
    first = app_process(*TINY_FIT, "--iters", "1000000", "--dump-every", "50", "--out", "out", cwd=tmp_path)
    try:
        wait_for(lambda: (tmp_path / "out" / "frames").is_dir(), 120, "the first fit's iterations")
        code, out, err = run_app(*TINY_FIT, "--out", "out", cwd=tmp_path)
        assert_one_error_line(code, out, err, 2, f"--out out is in use by another run (pid {first.pid}, "
                                                 "python -m app fit)")
        first.send_signal(sig)
        out, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert_one_error_line(first.returncode, out, err, 130, f"interrupted by {sig.name}: stopped after iteration")
    folder = tmp_path / "out"
    record = json.loads((folder / "fit.json").read_text())
    assert record["status"] == "interrupted" and record["interrupted"] and record["signal"] == sig.name
    assert 0 < record["iterations_done"] < 1000000 and len(record["losses"]) == record["iterations_done"]
    assert {"final.obj", "loss.png", "loss.svg", "frames"} <= set(os.listdir(folder))
    assert len(list((folder / "frames").iterdir())) == -(-record["iterations_done"] // 50)
    no_temporary_files(folder)


def case_fit_sigint_keeps_its_work(tmp_path):
    _interrupt_fit(tmp_path, signal.SIGINT)


def case_render_sigterm_keeps_its_frames(tmp_path):
    process = app_process("render", "--arch", "cpu", "--width", "64", "--height", "32", "--frames", "10000",
                          "--video", "gif", "--fps", "10", "--out", "out", cwd=tmp_path)
    try:
        wait_for(lambda: len(list((tmp_path / "out" / "frames").glob("*.png"))) >= 2
                 if (tmp_path / "out" / "frames").is_dir() else False, 120, "two frames")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert_one_error_line(process.returncode, out, err, 130, "interrupted by SIGTERM")
    record = json.loads((tmp_path / "out" / "render.json").read_text())
    done = record["frames_done"]
    assert record["interrupted"] and record["signal"] == "SIGTERM" and 2 <= done < 10000
    assert len(list((tmp_path / "out" / "frames").glob("frame_*.png"))) == done
    assert gif_duration_ms(tmp_path / "out" / "animation.gif") == done * 100  # Pillow merges equal frames, not time
    no_temporary_files(tmp_path / "out")


def gif_duration_ms(path: Path) -> int:
    """The total play time a GIF stores (the sum of its frame delays)."""
    image = Image.open(path)
    total = 0
    for index in range(image.n_frames):
        image.seek(index)
        total += image.info["duration"]
    return total


def _file_size_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def case_file_size_limit(tmp_path):
    code, out, err = run_app(*TINY_FIT, "--iters", "3", "--out", "out", cwd=tmp_path, preexec=_file_size_limit(16384))
    assert_one_error_line(code, out, err, 2, f"cannot write {Path('out') / 'loss.png'}: File too large")
    folder = tmp_path / "out"
    assert (folder / "final.obj").stat().st_size > 0, "the files written before are kept"
    assert not (folder / "fit.json").exists()
    no_temporary_files(folder)


def case_disk_fills_during_the_run(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("no tmpfs can be mounted here (needs root): the file-size-limit case covers a full disk")
    try:
        # 300 iterations, a mesh each: about 1.9 MiB by the run's own estimate, so the free-space check passes
        process = app_process(*TINY_FIT, "--iters", "300", "--dump-every", "1", "--out", str(mount / "out"),
                              cwd=tmp_path)
        try:
            wait_for(lambda: process.poll() is not None or (mount / "out" / "frames").is_dir()
                     and len(list((mount / "out" / "frames").glob("*.obj"))) >= 3, 120, "three frames")
            # another program fills the disk; unbuffered, so that closing the file has nothing left to flush
            # (a buffered tail raised ENOSPC from the `with` once the disk was full)
            with open(mount / "ballast", "wb", buffering=0) as ballast:
                try:
                    while True:
                        ballast.write(b"\0" * 65536)
                except OSError:
                    pass
            out, err = process.communicate(timeout=60)
        finally:
            process.kill()
        line = assert_one_error_line(process.returncode, out, err, 2, "No space left on device")
        assert f"cannot write {mount / 'out'}/" in line  # a frame, or a file after the loop on a fast machine
        frames = list((mount / "out" / "frames").glob("iter_*.obj"))
        assert len(frames) >= 3 and all(frame.stat().st_size > 0 for frame in frames)
        no_temporary_files(mount / "out")
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _manifest_entry(folder: Path, name: str, of: Path | None = None) -> str:
    """A manifest line recording `name` with the identity of the file `of` (itself by default)."""
    info = os.lstat(of or folder / name)
    return json.dumps({"file": name, "size": info.st_size, "mtime_ns": info.st_mtime_ns, "ino": info.st_ino,
                       "dev": info.st_dev})


def case_leftovers_of_other_runs_are_cleared(tmp_path):
    """A real fit's files are removed by the next run into its folder; nothing else is, whatever the manifest says."""
    folder, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    code, out, err = run_app(*TINY_FIT, "--iters", "3", "--dump-every", "1", "--out", "out", cwd=tmp_path)
    assert code in (0, 1), err
    first = set(json.loads((folder / "fit.json").read_text())["files"])
    assert {"fit.json", "final.obj", "frames/iter_00000.obj", "frames/iter_00002.obj"} <= first
    lines = (folder / output_dir.MANIFEST).read_text().splitlines()
    assert {json.loads(line)["file"] for line in lines[1:]} == first, "every file the fit wrote is recorded"
    # the user's own files beside them: an edited result, a file of theirs under a recorded name, their notes
    (folder / "final.obj").write_text("edited by the user\n")
    (folder / "frames" / "iter_00001.obj").unlink()
    (folder / "frames" / "iter_00001.obj").write_text("the user's own\n")
    (folder / "notes.txt").write_text("mine\n")
    elsewhere.mkdir()
    (elsewhere / "keep.obj").write_text("in another folder\n")
    (tmp_path / "outside.txt").write_text("outside --out\n")
    (folder / "linked").symlink_to(elsewhere)
    (folder / "link.obj").symlink_to(elsewhere / "keep.obj")
    # and a manifest that tries to reach them: patterns, a path out of the folder, one through a symlink
    with open(folder / output_dir.MANIFEST, "a") as manifest:
        for line in (json.dumps({"patterns": ["*", "*.txt", "frames/*"]}), _manifest_entry(folder, "notes.txt", None)
                     .replace('"size": 5', '"size": 6'), _manifest_entry(folder, "../outside.txt"),
                     _manifest_entry(folder, "linked/keep.obj"), _manifest_entry(folder, "link.obj"),
                     _manifest_entry(folder, "/" + str(elsewhere / "keep.obj").lstrip("/"))):
            manifest.write(line + "\n")
    before = files_under(elsewhere)
    code, out, err = run_app("fit", "--target", "blob", "--arch", "vulkan", "--out", "out", cwd=tmp_path,
                             env={"VK_ICD_FILENAMES": "/nonexistent/icd.json"})
    assert_one_error_line(code, out, err, 2, "backend vulkan is not available")
    left = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}
    assert left == {output_dir.MANIFEST, "final.obj", "frames/iter_00001.obj", "notes.txt", "linked", "link.obj"}
    assert (folder / "final.obj").read_text() == "edited by the user\n"
    assert (folder / "notes.txt").read_text() == "mine\n" and (tmp_path / "outside.txt").is_file()
    assert files_under(elsewhere) == before and (folder / "link.obj").is_symlink()
    assert "has no record of writing" in err  # the user's files under the fit's names are kept, and said so


def case_headless_parity_worker_cannot_start(tmp_path):
    code, out, err = run_app("--headless", "--arch", "cpu", "--parity-arch", "vulkan", "--only", "affine",
                             "--out", "out", cwd=tmp_path, env={"VK_ICD_FILENAMES": "/nonexistent/icd.json"})
    assert_one_error_line(code, out, err, 2, "backend vulkan is not available")
    assert not (tmp_path / "out" / "report.json").exists()


def case_headless_ctrl_c(tmp_path):
    """Ctrl-C reaches the whole process group: the parity worker says nothing, the runner one line."""
    process = app_process("--headless", "--arch", "cpu", "--parity-arch", "cpu", "--only",
                          "affine,tape_chain,sgd_oracle,chamfer_adam", "--out", "out", cwd=tmp_path,
                          start_new_session=True)
    try:
        lines = []
        while not any(line.startswith("AFFINE ACCEPTANCE") for line in lines):
            line = process.stdout.readline()
            assert line, "the run ended before the parity worker was up"
            lines.append(line)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    assert_one_error_line(process.returncode, "".join(lines) + out, err, 130, "interrupted by SIGINT: report.json")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["interrupted"] is True and report["claims"][0]["name"] == "affine"


@pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="the desktop app needs a display (scripts/test.sh: Xvfb)")
def case_app_backend_never_starts(tmp_path):
    code, out, err = run_app("--arch", "vulkan", "--parity-arch", "cpu", "--frames", "1", cwd=tmp_path,
                             env={"VK_ICD_FILENAMES": "/nonexistent/icd.json"})
    assert_one_error_line(code, out, err, 2, "the vulkan backend never started: backend vulkan is not available")
    assert "fps" not in out, "no frame-rate summary for a run that never had a backend"


@pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="the desktop app needs a display (scripts/test.sh: Xvfb)")
def case_app_ctrl_c(tmp_path):
    process = app_process("--arch", "cpu", "--parity-arch", "cpu", "--frames", "100000", "-v", cwd=tmp_path,
                          start_new_session=True)
    try:
        time.sleep(8)  # the window is up and both workers are starting or serving
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    assert_one_error_line(process.returncode, out, err, 130, "interrupted by SIGINT: the window was closed")


@pytest.mark.skipif(not os.environ.get("DISPLAY"), reason="the desktop app needs a display (scripts/test.sh: Xvfb)")
def case_app_frames_ctrl_c_after_warm_up(tmp_path):
    """With --frames N a Ctrl-C once went unheard after warm-up (the frame count reset the stop request each frame)
    until the test's SIGKILL 40-50 s later: now the window closes within seconds, exit code 130."""
    process = app_process("--arch", "cpu", "--parity-arch", "cpu", "--frames", "100000000", "-v", cwd=tmp_path,
                          start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")), daemon=True)
    reader.start()
    try:  # the app gives up waiting for live content after WARM_TIMEOUT_S (600 s): warm then, whatever came
        wait_for(lambda: any("warm after" in line for line in lines) or process.poll() is not None, 700,
                 "the window to be warm")
        assert process.poll() is None, "".join(lines)
        os.killpg(process.pid, signal.SIGINT)
        signalled = time.monotonic()
        process.wait(timeout=60)  # stderr is the reader's; stdout (a line at most) waits in its pipe
        took = time.monotonic() - signalled
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    reader.join(10)
    out, err = process.stdout.read(), "".join(lines)
    assert_one_error_line(process.returncode, out, err, 130, "interrupted by SIGINT: the window was closed")
    assert took < 20, f"the window took {took:.0f} s to close after SIGINT"


SUBPROCESS_CASES = [case_unreadable_mesh, case_read_only_out, case_fit_diverges, case_fit_ends_worse,
                    case_fit_sigint_keeps_its_work, case_render_sigterm_keeps_its_frames, case_file_size_limit,
                    case_disk_fills_during_the_run, case_leftovers_of_other_runs_are_cleared,
                    case_headless_parity_worker_cannot_start, case_headless_ctrl_c, case_app_backend_never_starts,
                    case_app_ctrl_c, case_app_frames_ctrl_c_after_warm_up]


# slow: each waits out the app's warm-up, a signal or a limit, or runs a fit (2 s to over a minute); the quick loop keeps the rest
SLOW_CASES = {case_app_frames_ctrl_c_after_warm_up, case_app_ctrl_c, case_app_backend_never_starts,
              case_fit_ends_worse, case_fit_sigint_keeps_its_work, case_file_size_limit, case_disk_fills_during_the_run,
              case_leftovers_of_other_runs_are_cleared}


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case
                                  for case in SUBPROCESS_CASES], ids=[case.__name__[5:] for case in SUBPROCESS_CASES])
def test_misuse_in_a_real_process(case, tmp_path):
    case(tmp_path)


# --- internal errors, crashed and stuck workers: exit code 3 with the traceback in a log ---------------------------

def test_an_internal_error_is_one_line_naming_its_log(inprocess, monkeypatch, tmp_path):
    from app.scenes import fit_run

    def bug(settings):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(fit_run, "_estimate_bytes", bug)
    line = assert_one_error_line(*inprocess(["fit", "--target", "blob"], {}), 3,
                                 "internal error (ZeroDivisionError: a bug); full traceback in ")
    log = Path(line.rsplit(" in ", 1)[1])
    assert log.parent == tmp_path / "logs" and "Traceback" in log.read_text() and ", in bug" in log.read_text()


@pytest.fixture
def misuse_claims(monkeypatch):
    from app import claims, headless

    table = {name: "tests.misuse_claims" for name in ("crashes", "worker_stopped", "worker_killed")}
    monkeypatch.setattr(headless, "CLAIMS", {**claims.CLAIMS, **table})
    return table


@pytest.mark.parametrize("claim, words", [
    ("crashes", "ZeroDivisionError: a bug in a claim"),
    pytest.param("worker_stopped", "was stopped (SIGSTOP?) for 2 s during computation tests.worker_faults:hang",
                 marks=pytest.mark.slow),
    ("worker_killed", "died during computation tests.worker_faults:hang (killed by SIGKILL)"),
])
def test_a_crash_in_a_claim_or_its_worker_is_exit_3_with_the_traceback_in_the_report(
        ti_cpu, misuse_claims, monkeypatch, capfd, tmp_path, claim, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHANNON_LOG_DIR", str(tmp_path / "logs"))
    started = time.monotonic()
    code = cli.main(["--headless", "--arch", "cpu", "--parity-arch", "cpu", "--only", claim, "--out", "out"])
    out, err = capfd.readouterr()
    assert time.monotonic() - started < 60, "a stuck worker must be reported within seconds"
    assert_one_error_line(code, out, err, 3, "internal error in 1 claim(s); full tracebacks in report.json and")
    record = json.loads((tmp_path / "out" / "report.json").read_text())["claims"][0]
    assert words in record["error"] and "Traceback" in record["traceback"]
    assert Path(record["crash_log"]).read_text().count("Traceback") >= 1


@pytest.mark.slow
def test_a_wedged_worker_is_reported_at_its_idle_limit(monkeypatch):
    from engine import worker as worker_module

    monkeypatch.setattr(worker_module, "IDLE_LIMIT_S", 2.0)
    with worker_module.BackendWorker("cpu") as worker:
        started = time.monotonic()
        with pytest.raises(worker_module.WorkerError, match=r"made no progress for 2 s .*wedged"):
            worker.call("tests.worker_faults:hang", timeout_s=300)
        assert time.monotonic() - started < 6 and not worker.alive


@pytest.mark.slow
def test_a_worker_killed_and_closed_from_many_threads_mid_call_raises_nothing():
    """The GUI's close killed a worker whose link thread was in a call: closing the pipe under that thread (or twice,
    from two threads) raised `OSError: [Errno 9] Bad file descriptor` (exit code 3 under load). Now the caller gets
    the WorkerError of a killed worker, and every kill and close, concurrent or repeated, returns quietly."""
    from engine import worker as worker_module

    for _ in range(2):
        worker = worker_module.BackendWorker("cpu")
        outcome: list = []

        def call() -> None:
            try:
                worker.call("tests.worker_faults:hang", timeout_s=300)
            except BaseException as exc:  # noqa: BLE001 - the test looks at what came out
                outcome.append(exc)

        def stop(method) -> None:
            try:
                method()
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        wait_for(lambda: bool(worker._users), 10, "the call to go out")
        time.sleep(0.3)
        stoppers = [threading.Thread(target=stop, args=(method,))
                    for method in (worker.kill, worker.close, worker.kill, worker.close)]
        for thread in stoppers:
            thread.start()
        for thread in [caller, *stoppers]:
            thread.join(30)
            assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], worker_module.WorkerError), outcome
        assert "died during computation tests.worker_faults:hang (killed by SIGKILL)" in str(outcome[0])
        assert not worker.alive and worker._conn.closed
        worker.kill()
        worker.close()
        with pytest.raises(worker_module.WorkerError, match="worker is not running"):
            worker.call("affine", x=np.ones(4, np.float32))


def test_a_worker_ignores_ctrl_c_and_keeps_serving():
    from tests.conftest import backend_worker

    worker = backend_worker("cpu")
    os.kill(worker.pid, signal.SIGINT)
    time.sleep(0.3)
    assert worker.alive
    assert worker.call("affine", x=np.ones(4, np.float32))["y"].shape == (4,)


def test_a_worker_that_dies_between_calls_is_shown_dead_by_its_link():
    from app.ui.links import WorkerLink

    link = WorkerLink("cpu", priorities=("render",))
    link.start()
    try:
        wait_for(lambda: link.status == "ready", 120, "the worker")
        os.kill(link._worker.pid, signal.SIGKILL)
        wait_for(lambda: link.status.startswith("unavailable"), 3, "the link to notice")
        assert link.status == "unavailable: the cpu worker died (killed by SIGKILL)"
    finally:
        link.close()


def test_the_loss_ending_above_its_start_is_found_from_where_it_stayed_above():
    from app.scenes.fit_run import _diverged_at

    assert _diverged_at([1.0, 0.5, 0.8, 1.2, 1.5], 2.0) == 3
    assert _diverged_at([1.0, 1.1, 1.2], 1.3) == 1
    assert _diverged_at([1.0, 0.5], 1.5) == 2  # only the last update made it worse
    assert _diverged_at([1.0, 1.5, 0.9], 0.8) is None
    assert _diverged_at([1.0, 0.5], float("nan")) == 2
