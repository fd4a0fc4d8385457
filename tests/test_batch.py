"""`python -m app batch` on Ray: jobs and plans without Ray, then real batches in subprocesses.

The batches run as a user runs them (`python -m app batch ...` in a subprocess, each with a
timeout, so a hang fails the test instead of the suite): on an embedded Ray with 2 CPUs, and on
a two-node cluster that the test starts on loopback (head 127.0.0.2, worker 127.0.0.3; Ray
rewrites 127.0.0.1 to the routable address) and stops by pid; its worker node runs in a mount
namespace where this checkout's packages and the inputs are empty folders, and one test kills it
mid-job. Every process a batch or a cluster starts inherits a tag in its environment; after each
command none may be left.
Sizes are tiny (subdivision 1, 4 iterations, 256 samples): set-up, not fitting, is what costs.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from app.batch import jobs as job_specs
from app.batch import store
from engine.errors import UserError
from engine.mesh_io import write_mesh
from engine.meshgen import icosphere, torus
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ["--grid", "lr=0.02,0.05", "--subdiv", "1", "--iters", "4", "--samples", "256", "--arch", "cpu"]
# The render batch's tasks run with Taichi's default CPU thread count (the machine's CPUs, as the single render):
# Taichi's offline-cache key holds the thread cap (TI_CPU_MAX_NUM_THREADS, which a task sets to its --cpus-per-task)
# besides the fields' SNode ids, so 1-thread tasks compiled the render kernel again, cold, in each worker side by
# side. Twice as many Ray CPUs keep two tasks running at once. (The fit batches keep 1-thread tasks: their kernels
# compile in seconds, and with 2-thread tasks two at a time on two cores they ran slower in a loaded suite run.)
TASK_THREADS = os.cpu_count() or 1
EMBEDDED_DEFAULT_THREADS = ["--cpus-per-task", str(TASK_THREADS), "--cpus", str(2 * TASK_THREADS)]
FIT_FILES = {"fit.json", "final.obj", "loss.png", "loss.svg"}
TIMEOUT = 420  # seconds for one batch command on a loaded 2-core machine


def needs_ray() -> None:
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        if IN_CI:
            pytest.fail('Ray must be installed in CI (pip install ".[batch]")')
        pytest.skip('needs Ray: pip install ".[batch]"')


# ---- jobs, plans and tables, without Ray ---------------------------------------------------------

def test_grid_values_ranges_and_order():
    grid = job_specs.parse_grid(["lr=0.01,0.03", "seed=0..3", "smooth-end=0.1"])
    assert grid == {"lr": [0.01, 0.03], "seed": [0, 1, 2, 3], "smooth_end": [0.1]}
    jobs = job_specs.fit_jobs(["spot"], grid, {"subdiv": 3}, "cpu", 1)
    assert [j.name for j in jobs][:3] == ["spot/lr0.01_seed0_smooth_end0.1", "spot/lr0.01_seed1_smooth_end0.1",
                                          "spot/lr0.01_seed2_smooth_end0.1"]
    assert len(jobs) == 8 and jobs[-1].settings == {"target": "spot", "subdiv": 3, "lr": 0.03, "seed": 3, "smooth_end": 0.1}


@pytest.mark.parametrize("items, words", [
    (["lr"], "expected KEY=V1,V2"),
    (["speed=1"], "KEY one of subdiv, iters, lr"),
    (["lr=0.1..0.3"], "--grid lr: '0.1..0.3' is not a number"),
    (["seed=3..1"], "--grid seed: '3..1' is not an integer or a range"),
    (["lr=nan"], "not a finite number"),
    (["seed=1,1"], "a value repeats"),
    (["lr=0.1", "lr=0.2"], "gives lr twice"),
])
def test_bad_grids_are_one_line_errors(items, words):
    with pytest.raises(UserError, match=words.replace(".", r"\.").replace("(", r"\(")):
        job_specs.parse_grid(items)


def test_targets_from_folders_globs_files_and_names(tmp_path):
    for name in ("b.obj", "a.PLY", "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.obj").write_text("x")
    found = job_specs.find_targets([str(tmp_path), "spot", str(tmp_path / "**" / "*.obj")])
    assert found == [str(tmp_path / "a.PLY"), str(tmp_path / "b.obj"), "spot", str(tmp_path / "sub" / "a.obj")]
    jobs = job_specs.fit_jobs(found, {}, {}, "cpu", 1)
    names = [j.name for j in jobs]
    assert names[1] == "b/default" and names[2] == "spot/default" and len(set(names)) == 4  # a.PLY, sub/a.obj: stems repeat
    with pytest.raises(UserError, match="no mesh file"):
        job_specs.find_targets([str(tmp_path / "*.stl")])
    with pytest.raises(UserError, match="no such file, folder or target name"):
        job_specs.find_targets(["nosuch.obj"])


def test_fit_argv_is_the_single_commands_flags():
    job = job_specs.fit_jobs(["blob"], {"seed": [2]}, {"subdiv": 1, "iters": 4, "lr": 0.05, "smooth": None}, "cpu", 1)[0]
    assert job_specs.fit_argv(job.settings, job.arch, "o") == [
        "--target", "blob", "--subdiv", "1", "--iters", "4", "--lr", "0.05", "--seed", "2", "--arch", "cpu", "--out", "o"]


def test_timeline_frames_split_into_tasks_and_the_orbit_turns_once():
    times = job_specs.parse_timeline("0:1:5")
    assert times == [0.0, 0.25, 0.5, 0.75, 1.0]
    jobs = job_specs.render_jobs(times, True, {"azimuth": 10.0, "elevation": 5.0, "distance": 4.0}, (64, 32), 2, "cpu", 1)
    assert [j.name for j in jobs] == ["frames_0000-0001", "frames_0002-0003", "frames_0004-0004"]
    assert [f[2] for j in jobs for f in j.settings["frames"]] == [10.0, 82.0, 154.0, 226.0, 298.0]
    for bad in ("0:1", "0:1:0", "0:2:3", "x"):
        with pytest.raises(UserError, match="--t"):
            job_specs.parse_timeline(bad)


def test_a_job_counts_as_done_only_whole_and_with_the_same_settings(tmp_path):
    job = job_specs.fit_jobs(["blob"], {}, {"iters": 4}, "cpu", 1)[0]
    assert store.done_row(tmp_path, job) is None
    result = {"row": {"job": job.name, "status": "ok", "pid": 7, "backend": "cpu", "error": ""},
              "files": {n: n.encode() for n in FIT_FILES}, "log": ""}
    store.save(tmp_path, job, result)
    folder = store.job_folder(tmp_path, job)
    assert {p.name for p in folder.iterdir()} == FIT_FILES | {"job.json"}
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # nothing half-built left beside it
    assert store.done_row(tmp_path, job)["resumed"] is True
    other = job_specs.fit_jobs(["blob"], {}, {"iters": 5}, "cpu", 1)[0]
    with pytest.raises(UserError, match="other settings"):
        store.done_row(tmp_path, other)
    store.save(tmp_path, job, {**result, "row": {**result["row"], "status": "error", "error": "x"}, "files": {}})
    assert store.done_row(tmp_path, job) is None  # a failed job runs again
    assert {p.name for p in folder.iterdir()} == {"job.json"}  # the failed run replaced the old folder whole


def test_winners_pick_the_lowest_chamfer_per_target():
    rows = [{"target": t, "status": s, "chamfer": c, "hausdorff": 0.1, "orders": 1.0, "lr": lr, "job": f"{t}{lr}"}
            for t, s, c, lr in [("a", "ok", 3.0, 0.1), ("a", "ok", 2.0, 0.2), ("a", "error", None, 0.3),
                                ("b", "ok", 1.0, 0.1), ("b", "diverged", None, 0.2)]]
    best = store.winners(rows, {"lr": [0.1, 0.2, 0.3]})
    assert {t: w["settings"] for t, w in best.items()} == {"a": {"lr": 0.2}, "b": {"lr": 0.1}}


def test_without_ray_one_line_and_exit_2():
    code = "import sys; sys.modules['ray'] = None; from app.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", code, "batch", "fit", "--targets", "blob", "--out", "x"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr == 'error: python -m app batch needs Ray: pip install ".[batch]" (from the project folder)\n'


def test_invert_jobs_are_the_invert_command_flags():
    grid = job_specs.parse_grid(["seed=1..2", "t=0.1"], job_specs.INVERT_KEYS)
    jobs = job_specs.invert_jobs(grid, {"iters": 3, "width": 64, "height": 32, "lr": None}, "cpu", 1)
    assert [job.name for job in jobs] == ["seed1_t0.1", "seed2_t0.1"]
    assert job_specs.invert_argv(jobs[1].settings, "cpu", "o") == [
        "--seed", "2", "--t", "0.1", "--iters", "3", "--width", "64", "--height", "32", "--arch", "cpu", "--out", "o"]
    with pytest.raises(UserError, match="KEY one of seed, t, iters, lr"):
        job_specs.parse_grid(["subdiv=1"], job_specs.INVERT_KEYS)


@pytest.mark.parametrize("flags, words", [(["--grid", "seed=1", "--t", "2"], "--t 2.0 is outside the timeline"),
                                          (["--perturb", "elbows=3"], "unknown group 'elbows'")])
def test_batch_invert_checks_its_flags_as_invert_does(flags, words, capsys, tmp_path):
    from app.cli import main

    assert main(["batch", "invert", *flags, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not (tmp_path / "o").exists()


# ---- batch limits (issue 30): counted before made, requests no node meets, hung jobs ---------------

def test_a_huge_grid_is_counted_not_expanded():
    """`seed=0..10**18` was a list of 10**18 values before anything was checked: now its length is arithmetic."""
    import tracemalloc

    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(UserError, match=r"^this batch would run 1,000,000,000,000,000,001 jobs \(1,000,000,000,000,000,001 "
                                        r"seed values\), more than --max-jobs 10,000: sweep fewer values, or raise --max-jobs$"):
        job_specs.parse_grid(["seed=0..1000000000000000000"])
    with pytest.raises(UserError, match=r"would run 12,000 jobs \(3 targets x 2 lr values x 2,000 seed values\)"):
        job_specs.parse_grid(["lr=0.1,0.2", "seed=1..1000,2001..3000"], per_point=3)
    with pytest.raises(UserError, match=r"would run 11 jobs .* more than --max-jobs 10:"):
        job_specs.parse_grid(["seed=0..10"], job_specs.INVERT_KEYS, max_jobs=10)
    took, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20 and took < 5, (peak, took)  # no list of values was made (loose: a loaded machine)
    assert len(job_specs.parse_grid(["seed=1..5000", "lr=0.1,0.2"])) == 2  # 10,000 jobs: the limit itself is allowed
    with pytest.raises(UserError, match="a value repeats"):  # values are still checked once counted
        job_specs.parse_grid(["seed=0..3,2"])


def test_a_huge_batch_is_refused_in_one_line_under_a_memory_limit(tmp_path):
    """As a user runs it, with the address space capped at 1.5 GiB: the old code expanded the grid first (minutes,
    tens of GiB); each refusal names the limit's flag and the count, exit 2, and leaves no folder."""
    needs_ray()

    def capped() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    cases = [(["fit", "--targets", "blob", "spot", "--grid", "seed=0..999999999999", "lr=0.1,0.2"],
              "this batch would run 4,000,000,000,000 jobs (2 targets x 1,000,000,000,000 seed values x 2 lr values), "
              "more than --max-jobs 10,000"),
             (["fit", "--targets", "blob", "--grid", "seed=0..99", "--max-jobs", "50"], "would run 100 jobs"),
             (["invert", "--grid", "seed=1..100000000000"], "more than --max-jobs 10,000"),
             (["render", "--t", "0:1:200000", "--frames-per-task", "2"], "would run 100,000 jobs (200,000 frames, 2 per "
                                                                           "task), more than --max-jobs 10,000"),
             (["render", "--t", "0:1:9999999999"], "9,999,999,999 frames, more than a batch renders (1,000,000)")]
    for argv, words in cases:
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "app", "batch", *argv, "--out", str(tmp_path / "o")],
                                capture_output=True, text=True, timeout=120, cwd=ROOT, preexec_fn=capped)
        took = time.monotonic() - started
        assert result.returncode == 2 and result.stderr.count("\n") == 1, (argv, result.stderr)
        assert result.stderr.startswith("error: ") and words in result.stderr, (argv, result.stderr)
        assert took < 60 and not (tmp_path / "o").exists(), (argv, took)  # loose: the interpreter's start, mostly


@pytest.mark.parametrize("cpus, gpus, nodes, expected", [
    (2, 0, [{"CPU": 2.0}], None),
    (3, 0, [{"CPU": 2.0}], "--cpus-per-task 3: no node of this Ray has 3 CPUs (1 node: 2 CPUs)"),
    (2, 0, [{"CPU": 1.0}, {"CPU": 1.0}], "no node of this Ray has 2 CPUs (2 nodes: 2 x 1 CPUs)"),  # 2 in all: not on one
    (4, 1, [{"CPU": 16.0}, {"CPU": 2.0, "GPU": 1.0}],
     "--cpus-per-task 4 (with the GPU of a cuda job): no node of this Ray has 4 CPUs and 1 GPU (2 nodes: 16 CPUs, "
     "2 CPUs + 1 GPUs)"),
    (2, 1, [{"CPU": 16.0}, {"CPU": 2.0, "GPU": 1.0}], None),
    (1, 0, [], "(0 nodes: none)"),
])
def test_a_request_no_node_can_meet_is_named_with_what_there_is(cpus, gpus, nodes, expected):
    needs_ray()
    from app.batch.ray_session import infeasible

    reason = infeasible(cpus, gpus, nodes)
    assert (reason is None) if expected is None else (expected in reason and "would wait forever" in reason), reason


@pytest.mark.slow
def test_more_cpus_per_task_than_the_machine_has_is_refused_at_once_leaving_nothing(tmp_path):
    """The embedded Ray (all this machine's CPUs) cannot run a 64-CPU task: one line in seconds, not a silent hang;
    no temp folder, no process and no output folder left. With --cpus given it is refused before Ray starts."""
    needs_ray()
    tag, temp = secrets.token_hex(4), tempfile.mkdtemp(prefix="shannon-t-")  # short: Ray's socket paths
    try:
        many = (os.cpu_count() or 1) * 32
        started = time.monotonic()
        result = run_batch(["fit", "--targets", "blob", "--arch", "cpu", "--cpus-per-task", str(many), "--out",
                            str(tmp_path / "o")], tag, TMPDIR=temp)
        took = time.monotonic() - started
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"error: --cpus-per-task {many}: no node of this Ray has {many} CPUs (1 node: ")
        assert took < 120 and not (tmp_path / "o").exists() and os.listdir(temp) == [], (took, os.listdir(temp))
        assert_none_left(tag)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    from app.cli import main

    assert main(["batch", "fit", "--targets", "blob", "--cpus", "2", "--cpus-per-task", "3", "--out",
                 str(tmp_path / "o")]) == 2 and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_job_past_job_timeout_is_killed_and_the_batch_goes_on(targets, tmp_path):
    """Two jobs side by side: 4 iterations (seconds) and 1,000,000 (a quarter of an hour). With --job-timeout 90 the
    second's worker is killed 90 s after it started, its row says timed_out, the first is ok; exit 1 (a result is
    bad), and nothing is left running. (90 s: a first fit compiles its kernels, 14 s cold on a quiet 2-core machine;
    with 30 s and with 60 s the quick job timed out while it compiled, on a machine loaded 7-14.)"""
    needs_ray()
    out, tag = tmp_path / "out", secrets.token_hex(4)
    started = time.monotonic()
    result = run_batch(["fit", "--targets", str(targets / "egg.obj"), "--grid", "iters=4,1000000", "--subdiv", "1",
                        "--samples", "256", "--arch", "cpu", "--cpus", "2", "--job-timeout", "90", "--out", str(out)], tag)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    rows = rows_of(out)
    quick, hung = rows["egg/iters4"], rows["egg/iters1000000"]
    assert quick["status"] == "ok" and quick["iterations"] == 4, quick
    assert hung["status"] == "timed_out" and isinstance(hung["pid"], int) and hung["node"], hung
    assert hung["error"] == f"stopped after --job-timeout 90 s (its worker, pid {hung['pid']}, was killed)"
    assert "timed_out egg/iters1000000: stopped after --job-timeout 90 s" in result.stdout
    assert json.loads((out / "batch.json").read_text())["counts"]["timed_out"] == 1
    assert {p.name for p in (out / "jobs" / "egg" / "iters1000000").iterdir()} == {"job.json"}
    assert (out / "jobs" / "egg" / "iters4" / "fit.json").is_file()
    assert took < 300, took  # 90 s and Ray's start and stop, not the job's quarter of an hour
    assert_none_left(tag)


# ---- real batches -------------------------------------------------------------------------------

def tagged_processes(tag: str) -> list[str]:
    """Processes alive with `tag` in their environment (every process a command of this test started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"SHANNON_TEST_TAG={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_bytes()[:60]!r}")
        except OSError:
            continue
    return found


def assert_none_left(tag: str) -> None:
    deadline = time.monotonic() + 15  # a worker notices its raylet is gone within a second or two
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged_processes(tag) == []


def batch_env(tag: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "SHANNON_TEST_TAG": tag, **extra}


def run_batch(args: list[str], tag: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "batch", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=ROOT, env=batch_env(tag, **extra))


def rows_of(out: Path) -> dict[str, dict]:
    return {row["job"]: row for row in json.loads((out / "batch.json").read_text())["rows"]}


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> Path:
    """Six targets: five small meshes far enough from the starting sphere that 4 iterations lower the loss
    (a target close to it, e.g. a blob, ends above its first loss: `diverged`), and a broken file."""
    folder = tmp_path_factory.mktemp("targets")
    sphere_v, sphere_f = icosphere(2)
    write_mesh(folder / "egg.obj", sphere_v * [1.6, 1.0, 1.0], sphere_f)
    write_mesh(folder / "disc.obj", sphere_v * [1.0, 0.3, 1.0] + [5.0, 0.0, -2.0], sphere_f)
    write_mesh(folder / "spindle.obj", sphere_v * [0.5, 2.0, 0.5], sphere_f)
    write_mesh(folder / "ring.obj", *torus(n_major=24, n_minor=12))
    write_mesh(folder / "pebble.obj", sphere_v * [1.5, 0.8, 0.5], sphere_f)
    (folder / "broken.obj").write_text("v 0 0 0\nnot a mesh at all\n")
    return folder


@pytest.fixture(scope="module")
def singles(targets, tmp_path_factory) -> dict[str, Path]:
    """Single `fit` runs of four of the batch's jobs (two targets, both settings), in one process."""
    out = tmp_path_factory.mktemp("singles")
    commands = {f"{stem}/lr{lr}": ["--target", str(targets / f"{stem}.obj"), "--subdiv", "1", "--iters", "4", "--lr",
                                   str(lr), "--samples", "256", "--seed", "0", "--arch", "cpu",
                                   "--out", str(out / stem / str(lr))]
                for stem in ("egg", "ring") for lr in (0.02, 0.05)}
    code = ("import json, sys; from app.cli import main; from engine import backend\n"
            "for argv in json.loads(sys.argv[1]):\n    assert main(['fit', *argv]) == 0\n    backend.stop()\n")
    subprocess.run([sys.executable, "-c", code, json.dumps(list(commands.values()))], check=True, timeout=TIMEOUT,
                   cwd=ROOT, env=batch_env("singles"), capture_output=True)
    return {job: Path(argv[-1]) for job, argv in commands.items()}


def assert_same_as_single(job_folder: Path, single: Path) -> None:
    for name in ("final.obj", "loss.png", "loss.svg"):
        assert (job_folder / name).read_bytes() == (single / name).read_bytes(), name
    batch_record, single_record = (json.loads((f / "fit.json").read_text()) for f in (job_folder, single))
    batch_record.pop("wall_s"), single_record.pop("wall_s")  # the one field that differs run to run
    assert batch_record == single_record


def assert_the_batch_of_six(out: Path, targets: Path, singles: dict[str, Path], result) -> dict[str, dict]:
    assert result.returncode == 1, result.stderr  # one target is broken: the batch worked, a result is bad
    rows = rows_of(out)
    stems = ("broken", "disc", "egg", "pebble", "ring", "spindle")
    assert sorted(rows) == sorted(f"{s}/lr{lr}" for s in stems for lr in (0.02, 0.05))
    for name, row in rows.items():
        if name.startswith("broken/"):
            assert row["status"] == "error" and "broken.obj" in row["error"] and row["backend"] == ""
            continue
        assert row["status"] == "ok" and row["backend"] == "cpu" and row["iterations"] == 4 and row["misses"] == 0
        assert row["chamfer"] > 0 and row["hausdorff"] > 0 and isinstance(row["pid"], int) and row["node"]
        assert len(row["node_id"]) == 56 and int(row["node_id"], 16) >= 0  # Ray's node id: 28 bytes, hex
        assert {p.name for p in (out / "jobs" / name).iterdir()} == FIT_FILES | {"job.json"}
    for job, single in singles.items():
        assert_same_as_single(out / "jobs" / job, single)
    summary = json.loads((out / "batch.json").read_text())
    assert summary["counts"] == {"ok": 10, "error": 2, "diverged": 0, "not_converged": 0, "timed_out": 0,
                                 "interrupted": 0}
    assert set(summary["winners"]) == {str(targets / f"{s}.obj") for s in stems if s != "broken"}
    header = (out / "batch.csv").read_text().splitlines()[0].split(",")
    assert header[:2] == ["job", "target"] and {"status", "chamfer", "node", "node_id", "pid", "backend",
                                                "error"} <= set(header)
    return rows


def assert_a_line_a_job(result, ran: int, ok: int) -> None:
    """stderr is a pipe here, so no bar: one line a finished job, numbered, with the tally so far."""
    done = [line for line in result.stderr.splitlines() if " done: " in line]
    assert [line.split("batch fit: ")[1].split(" of ")[0] for line in done] == [str(k) for k in range(1, ran + 1)]
    assert all(f" of {ran} done: " in line for line in done) and done[-1].endswith(f"(ok {ok}, failed {ran - ok})")


NICENESS = """
import os, ray
from app.batch.ray_session import RaySession
with RaySession(cpus=1):
    niceness = ray.get(ray.remote(lambda: os.nice(0)).remote())
print(niceness)
"""


def test_an_embedded_batchs_workers_run_at_normal_priority(tmp_path):
    """Ray starts its workers at nice 15 by default: beside two busy loops on 2 cores a batch of 4-iteration fits then
    overran 7 minutes and a quick job its --job-timeout. The embedded session runs them at 0; the user's own
    RAY_worker_niceness wins."""
    needs_ray()
    script = tmp_path / "niceness.py"
    script.write_text(NICENESS)
    tag = secrets.token_hex(4)
    for extra, expected in (({}, "0"), ({"RAY_worker_niceness": "5"}, "5")):
        result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT,
                                cwd=ROOT, env=batch_env(tag, **extra))
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[-1] == expected, result.stdout
    assert_none_left(tag)


@pytest.mark.slow
def test_embedded_batch_rows_outputs_and_resume(targets, singles, tmp_path):
    needs_ray()
    out, tag = tmp_path / "out", secrets.token_hex(4)
    args = ["fit", "--targets", str(targets), *SETTINGS, "--cpus", "2", "--out", str(out), "--report"]
    first = run_batch(args, tag)
    rows = assert_the_batch_of_six(out, targets, singles, first)
    assert_a_line_a_job(first, 12, 10)
    assert "best for" in first.stdout and (out / "report.png").read_bytes().startswith(b"\x89PNG")
    assert_none_left(tag)

    # resume: a lost job folder and the error rows run again, nothing else
    (out / "jobs" / "egg" / "lr0.05" / "job.json").unlink()
    again = run_batch(args, tag)
    rows_again = assert_the_batch_of_six(out, targets, singles, again)
    assert_a_line_a_job(again, 3, 1)
    ran = {name for name, row in rows_again.items() if not row.get("resumed")}
    assert ran == {"egg/lr0.05", "broken/lr0.02", "broken/lr0.05"}
    assert all(rows_again[n]["pid"] == rows[n]["pid"] for n in rows if n not in ran)
    assert "(9 done before)" in again.stdout
    assert_none_left(tag)


def _kill_one_running_job(tag: str, deadline_s: float) -> tuple[int, str] | None:
    """SIGKILL the first worker seen running a batch job (Ray names it ray::batch fit JOB)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
                if title.startswith("ray::batch fit ") and f"SHANNON_TEST_TAG={tag}".encode() in \
                        Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
                    return int(pid), title.removeprefix("ray::batch fit ")
            except (OSError, UnicodeDecodeError):
                continue
        time.sleep(0.05)
    return None


@pytest.mark.slow
def test_a_killed_worker_is_retried_and_the_batch_completes(targets, singles, tmp_path):
    needs_ray()
    out, tag = tmp_path / "out", secrets.token_hex(4)
    args = ["fit", "--targets", str(targets / "egg.obj"), str(targets / "ring.obj"), *SETTINGS, "--cpus", "2",
            "--out", str(out)]
    batch = subprocess.Popen([sys.executable, "-m", "app", "batch", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, env=batch_env(tag))
    try:
        killed = _kill_one_running_job(tag, 180)
        stdout, stderr = batch.communicate(timeout=TIMEOUT)
    finally:
        if batch.poll() is None:
            batch.kill()
    assert killed is not None, "no job was seen running"
    assert batch.returncode == 0, stderr
    rows = rows_of(out)
    assert [row["status"] for row in rows.values()] == ["ok"] * 4
    assert killed[0] not in {row["pid"] for row in rows.values()}  # the killed job ran again, elsewhere
    for job, single in singles.items():
        assert_same_as_single(out / "jobs" / job, single)
    assert "worker died" in (out / "ray.log").read_text()  # Ray's notice, once in our stdout
    assert all(line.startswith(("batch fit: 4 jobs: 4 ok", "  Ray's ports: ", "  Ray's own messages ", "  best for "))
               for line in stdout.splitlines()), stdout
    assert_none_left(tag)


@pytest.mark.slow
def test_ctrl_c_keeps_finished_jobs_and_marks_the_rest(targets, tmp_path):
    needs_ray()
    out, tag = tmp_path / "out", secrets.token_hex(4)
    args = ["fit", "--targets", str(targets / "egg.obj"), str(targets / "ring.obj"), "--grid", "seed=0..5", "--subdiv",
            "1", "--iters", "4", "--samples", "256", "--arch", "cpu", "--cpus", "2", "--out", str(out)]
    batch = subprocess.Popen([sys.executable, "-m", "app", "batch", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, env=batch_env(tag), start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not list((out / "jobs").glob("*/*/job.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        os.killpg(batch.pid, signal.SIGINT)  # what Ctrl-C at a terminal does: the whole foreground group
        stdout, stderr = batch.communicate(timeout=120)
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
    assert batch.returncode == 130, stderr
    rows = rows_of(out)
    statuses = [row["status"] for row in rows.values()]
    assert len(rows) == 12 and statuses.count("ok") >= 1 and statuses.count("interrupted") >= 1
    assert set(statuses) == {"ok", "interrupted"}
    for name, row in rows.items():
        assert (out / "jobs" / name / "fit.json").is_file() == (row["status"] == "ok")
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: interrupted by SIGINT: ")
    assert_none_left(tag)


@pytest.mark.slow
def test_batch_render_frames_equal_single_renders(tmp_path):
    needs_ray()
    from engine.render import Camera

    out, tag = tmp_path / "out", secrets.token_hex(4)
    # the single render first: it compiles the render kernel once (into the offline cache), the two workers load it
    single = subprocess.run([sys.executable, "-m", "app", "render", "--t", "0.5", "--azimuth", str(Camera().azimuth + 120.0),
                             "--width", "48", "--height", "24", "--arch", "cpu", "--out", str(tmp_path / "one")],
                            capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=batch_env(tag))
    assert single.returncode == 0, single.stderr
    result = run_batch(["render", "--t", "0:1:3", "--orbit", "--width", "48", "--height", "24", "--frames-per-task", "2",
                        "--arch", "cpu", *EMBEDDED_DEFAULT_THREADS, "--out", str(out)], tag)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "frames").iterdir()) == ["frame_0000.png", "frame_0001.png", "frame_0002.png"]
    assert [row["frames"] for row in rows_of(out).values()] == [2, 1]
    assert (out / "frames" / "frame_0001.png").read_bytes() == (tmp_path / "one" / "frame.png").read_bytes()
    assert (out / "frames" / "frame_0000.png").read_bytes() != (out / "frames" / "frame_0001.png").read_bytes()
    assert_none_left(tag)


# ---- a two-node cluster on loopback --------------------------------------------------------------

def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Stop a `ray start --block` and everything it started (its own process group), by pid."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # whatever of the group is left
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def _wait_for_line(log: Path, text: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert process.poll() is None, f"ray start exited: {log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.2)
    pytest.fail(f"no '{text}' in {log} after {timeout_s} s: {log.read_text(errors='replace')[-2000:]}")


def _can_hide_paths() -> bool:
    """Whether this machine lets a user start a process in its own mount namespace (`unshare -Urm`)."""
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def loopback_cluster(tmp_path: Path, tag: str, hide: list[Path] = ()) -> Iterator[tuple[str, dict]]:
    """A two-node Ray cluster on loopback (head 127.0.0.2, worker 127.0.0.3, 1 CPU each, token authentication),
    started with `ray start` from a folder of its own, stopped by process group on the way out: (address, env).

    The worker node runs in a mount namespace of its own where each folder of `hide` is an empty tmpfs: its
    processes cannot read what is there (this checkout's packages, a batch's inputs)."""
    ray_bin = Path(sys.executable).with_name("ray")
    port = _free_port("127.0.0.2")
    env = batch_env(tag, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_USAGE_STATS_ENABLED="0")
    temp = tempfile.mkdtemp(prefix="shannon-rt-")  # short: Ray's socket paths must fit 107 bytes
    common = ["--block", "--num-cpus=1", "--disable-usage-stats", f"--temp-dir={temp}"]
    nodes = []
    try:
        for name, flags in (("head", ["--head", "--node-ip-address=127.0.0.2", f"--port={port}",
                                      "--include-dashboard=false"]),
                            ("worker", [f"--address=127.0.0.2:{port}", "--node-ip-address=127.0.0.3"])):
            command = [str(ray_bin), "start", *flags, *common]
            if name == "worker" and hide:  # sh mounts a tmpfs on each folder before `--`, then runs what follows
                command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                           'while [ "$1" != -- ]; do mount -t tmpfs none "$1" || exit 9; shift; done; shift; exec "$@"',
                           "sh", *map(str, hide), "--", *command]
            log = tmp_path / f"{name}.log"
            # TMPDIR: the folders of a job whose node is killed stay (Ray cannot clean them): here, in `temp`
            nodes.append(subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=temp,
                                          env={**env, "TMPDIR": temp}, start_new_session=True))
            _wait_for_line(log, "Ray runtime started", nodes[-1], 120)
        yield f"127.0.0.2:{port}", env
    finally:
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_two_node_cluster_on_loopback(targets, singles, tmp_path):
    """A batch on a two-node cluster whose worker node cannot see this checkout's code nor the input folder (where
    the machine allows a mount namespace): its jobs run there all the same, on the code and meshes the batch
    shipped, with the results of single runs. Then a wrong token and a request no node meets: one line each."""
    needs_ray()
    tag = secrets.token_hex(4)
    hidden = [ROOT / "app", ROOT / "engine", ROOT / "assets", targets] if _can_hide_paths() else []
    if IN_CI and not hidden:
        pytest.fail("unshare -Urm is refused here: the worker node would see the checkout and the inputs")
    with loopback_cluster(tmp_path, tag, hidden) as (address, env):
        out = tmp_path / "out"
        result = subprocess.run([sys.executable, "-m", "app", "batch", "fit", "--targets", str(targets), *SETTINGS,
                                 "--address", address, "--connect-timeout", "60", "--out", str(out)],
                                capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)
        rows = assert_the_batch_of_six(out, targets, singles, result)
        assert_a_line_a_job(result, 12, 10)
        assert {row["node"] for row in rows.values() if row["status"] == "ok"} == {"127.0.0.2", "127.0.0.3"}
        assert len({row["node_id"] for row in rows.values() if row["status"] == "ok"}) == 2
        summary = json.loads((out / "batch.json").read_text())
        assert summary["ray"]["nodes"] == 2 and summary["ray"]["token_auth"] is True
        assert "token authentication on" in result.stdout and not (out / "ray.log").exists()
        own_temp = tmp_path / "temp"  # the refused command's TMPDIR: its staged copy of our code must go too
        own_temp.mkdir()
        refused = subprocess.run([sys.executable, "-m", "app", "batch", "fit", "--targets", "blob", "--out",
                                  str(tmp_path / "refused"), "--address", address], capture_output=True,
                                 text=True, timeout=120, cwd=ROOT,
                                 env={**env, "RAY_AUTH_TOKEN": "0" * 32, "TMPDIR": str(own_temp)})
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and refused.stdout == ""
        assert "the cluster refused this command's token" in refused.stderr and os.listdir(own_temp) == []
        # 2 CPUs in all, 1 on each node: a 2-CPU task fits nowhere (Ray would queue it forever, silently)
        too_big = subprocess.run([sys.executable, "-m", "app", "batch", "fit", "--targets", "blob", "--cpus-per-task",
                                  "2", "--out", str(tmp_path / "too_big"), "--address", address],
                                 capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
        assert too_big.returncode == 2 and too_big.stderr == (
            "error: --cpus-per-task 2: no node of this Ray has 2 CPUs (2 nodes: 2 x 1 CPUs); the tasks would wait "
            "forever\n") and not (tmp_path / "too_big").exists()
    assert_none_left(tag)


def _node_raylet(address: str, tag: str) -> int:
    """The pid of the raylet of the node at `address` started by this test."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"/raylet") and f"--node_ip_address={address}".encode() in argv and \
                    f"SHANNON_TEST_TAG={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no raylet of node {address}")


def _job_running_under(parent: int, deadline_s: float) -> str | None:
    """The job a worker of `parent` (a raylet) runs, as soon as one does (Ray titles it ray::batch fit JOB)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
                    if title.startswith("ray::batch fit "):
                        return title.removeprefix("ray::batch fit ")
            except (OSError, UnicodeDecodeError, IndexError, ValueError):
                continue
        time.sleep(0.05)
    return None


@pytest.mark.slow
def test_a_node_lost_mid_job_runs_it_again_elsewhere_with_the_same_results(targets, singles, tmp_path):
    """The worker node's raylet is SIGKILLed while its worker runs a job: Ray marks the node dead, the job runs again
    on the head, and every result equals the single run's. Ray's account of the loss (the raylet's last log
    lines, the notice of the retried task) goes to OUT/ray.log, named in one line: stdout and stderr hold only
    the batch's own lines."""
    needs_ray()
    tag, out = secrets.token_hex(4), tmp_path / "out"
    with loopback_cluster(tmp_path, tag) as (address, env):
        batch = subprocess.Popen([sys.executable, "-m", "app", "batch", "fit", "--targets", str(targets / "egg.obj"),
                                  str(targets / "ring.obj"), *SETTINGS, "--address", address, "--out", str(out)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        try:
            raylet = _node_raylet("127.0.0.3", tag)
            lost = _job_running_under(raylet, 180)
            os.kill(raylet, signal.SIGKILL)
            stdout, stderr = batch.communicate(timeout=TIMEOUT)
        finally:
            if batch.poll() is None:
                batch.kill()
    assert lost is not None, "no job was seen running on the worker node"
    assert batch.returncode == 0, stderr
    rows = rows_of(out)
    assert [row["status"] for row in rows.values()] == ["ok"] * 4
    assert rows[lost]["node"] == "127.0.0.2"  # the lost job ran again, on the node left
    for job, single in singles.items():
        assert_same_as_single(out / "jobs" / job, single)
    logged = (out / "ray.log").read_text()
    assert "Raylet is terminated" in logged and "127.0.0.3" in logged, logged[-2000:]
    lines = json.loads((out / "batch.json").read_text())["ray"]["log_lines"]
    assert lines == logged.count("\n") - 1 > 10  # the run's header line aside
    assert f"  Ray's own messages ({lines} lines) -> {out}/ray.log" in stdout.splitlines()
    assert all(line.startswith(("batch fit: 4 jobs: 4 ok", "  Ray's ports here: ", "  Ray's own messages ",
                                "  best for ")) for line in stdout.splitlines()), stdout
    assert all(line.startswith("batch fit: ") and " of 4 done: " in line for line in stderr.splitlines()), stderr
    assert_none_left(tag)


@pytest.mark.slow
def test_a_cluster_that_does_not_answer_is_one_line_after_the_timeout(tmp_path):
    needs_ray()
    tag = secrets.token_hex(4)
    with socket.socket() as silent:  # accepts connections (the kernel does), never speaks
        silent.bind(("127.0.0.2", 0))
        silent.listen()
        started = time.monotonic()
        temp = tmp_path / "temp"
        temp.mkdir()
        hung = run_batch(["fit", "--targets", "blob", "--out", str(tmp_path / "a"), "--address",
                          f"127.0.0.2:{silent.getsockname()[1]}", "--connect-timeout", "5"], tag, TMPDIR=str(temp))
        waited = time.monotonic() - started
    assert hung.returncode == 2 and hung.stderr.count("\n") == 1 and waited < 60
    assert os.listdir(temp) == []  # the staged copy of our code did not outlive the command
    assert hung.stderr.startswith("error: --address 127.0.0.2:") and "did not connect within 5 s" in hung.stderr
    nobody = run_batch(["fit", "--targets", "blob", "--out", str(tmp_path / "b"), "--address",
                        f"127.0.0.2:{_free_port('127.0.0.2')}"], tag)
    assert nobody.returncode == 2 and "no Ray head answers there" in nobody.stderr and nobody.stderr.count("\n") == 1
    assert_none_left(tag)


def _listening_in_ss(tag: str) -> list[tuple[str, str, int]]:
    """`ss`'s view of the TCP ports the processes of this test listen on: (process name, address, port)."""
    import re

    table = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30, check=True).stdout
    tagged = {int(entry.split()[0]) for entry in tagged_processes(tag)}
    found = []
    for line in table.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            if int(pid) in tagged:
                found.append((name, address.strip("[]"), int(port)))
    return found


@pytest.mark.slow
def test_an_embedded_batch_says_where_ray_listens_and_refuses_other_tokens(targets, tmp_path):
    """Ray 2.60 listens on every interface whatever the node's address: the batch measures its processes' ports and
    says so (stdout, batch.json), as `ss` sees them; its node address is loopback, so nothing listens on a routable
    address; its GCS refuses a driver with another token. (A long job, interrupted once the probes are done.)"""
    needs_ray()
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2) to see the ports from outside the batch")
    tag, out = secrets.token_hex(4), tmp_path / "out"
    batch = subprocess.Popen([sys.executable, "-m", "app", "batch", "fit", "--targets", str(targets / "egg.obj"),
                              "--subdiv", "1", "--iters", "1000000", "--samples", "256", "--arch", "cpu", "--cpus", "1",
                              "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env=batch_env(tag), start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not any("ray::batch fit" in entry for entry in tagged_processes(tag)) and time.monotonic() < deadline:
            time.sleep(0.2)
        seen = _listening_in_ss(tag)
        gcs = next(port for name, _, port in seen if name == "gcs_server")
        other_token = run_batch(["fit", "--targets", "blob", "--out", str(tmp_path / "other"), "--address",
                                 f"127.0.0.2:{gcs}"], tag, RAY_AUTH_TOKEN="0" * 64)
        os.killpg(batch.pid, signal.SIGINT)
        stdout, stderr = batch.communicate(timeout=120)
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
    assert batch.returncode == 130, stderr
    assert other_token.returncode == 2 and "the cluster refused this command's token" in other_token.stderr
    assert {address for _, address, _ in seen} <= {"*", "0.0.0.0", "::", "127.0.0.2"}, seen  # none routable
    every = {(name, port) for name, address, port in seen if address in ("*", "0.0.0.0", "::")}
    assert {"gcs_server", "raylet", "python"} <= {name for name, _ in every}, seen  # python: the batch's driver
    ray = json.loads((out / "batch.json").read_text())["ray"]
    reported = {(entry["process"], entry["port"]) for entry in ray["ports"] if entry["reach"] == "every interface"}
    assert {entry for entry in every if entry[0] in ("gcs_server", "raylet", "python")} <= reported, (every, reported)
    assert ray["token_auth"] is True
    line = next(line for line in stdout.splitlines() if line.startswith("  Ray's ports: "))
    assert f"{len(reported)} on every interface (" in line and "this command" in line and "gcs_server" in line
    assert "Ray 2.60 cannot bind them to loopback" in line and line.endswith("token authentication on")
    assert_none_left(tag)


@pytest.mark.slow
def test_a_fit_job_reads_the_mesh_it_was_sent_not_its_path(targets, singles, tmp_path):
    """As on a node without the input folder: the job names a path that does not exist here and carries the mesh's
    bytes; its files are the single run's on the real path, but for the path they name (fit.json, the OBJ header).
    A mesh the driver could not read and a broken one are error rows naming the path as given."""
    gone = f"/nonexistent-{secrets.token_hex(4)}"
    code = """if True:
        import json, pathlib, sys
        from app.batch.execute import run_job
        from app.batch.jobs import fit_jobs
        gone, egg, out = sys.argv[1], pathlib.Path(sys.argv[2]).read_bytes(), pathlib.Path(sys.argv[3])
        base = {"subdiv": 1, "iters": 4, "lr": 0.02, "samples": 256, "seed": 0}
        ok = run_job(fit_jobs([gone + "/egg.obj"], {}, base, "cpu", 1)[0], egg)
        for name, data in ok["files"].items():
            (out / name).write_bytes(data)
        unread = run_job(fit_jobs([gone + "/a.obj"], {}, base, "cpu", 1)[0], "cannot be read (Permission denied)")
        broken = run_job(fit_jobs([gone + "/broken.obj"], {}, base, "cpu", 1)[0], b"v 0 0 0\\nnot a mesh\\n")
        print(json.dumps([ok["row"], unread["row"], broken["row"]]))
    """
    result = subprocess.run([sys.executable, "-c", code, gone, str(targets / "egg.obj"), str(tmp_path)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=batch_env("shipped"))
    assert result.returncode == 0, result.stderr
    ok, unread, broken = json.loads(result.stdout.strip().splitlines()[-1])
    assert ok["status"] == "ok" and ok["chamfer"] > 0, ok
    single = singles["egg/lr0.02"]
    record = json.loads((tmp_path / "fit.json").read_text())
    assert record.pop("target") == f"{gone}/egg.obj"
    (tmp_path / "fit.json").write_text(json.dumps({**record, "target": str(targets / "egg.obj")}))
    mesh = (tmp_path / "final.obj").read_bytes()
    assert mesh.startswith(f"# shape fit onto {gone}/egg.obj, iteration 4\n".encode())
    (tmp_path / "final.obj").write_bytes(mesh.replace(gone.encode(), str(targets).encode(), 1))
    assert_same_as_single(tmp_path, single)
    assert unread["status"] == "error" and unread["error"] == f"mesh file {gone}/a.obj: cannot be read (Permission denied)"
    assert broken["status"] == "error" and broken["error"].startswith(f"mesh file {gone}/broken.obj: "), broken
    assert "shannon-input" not in broken["error"]


def test_taichi_restarted_per_job_reuses_its_cached_kernels_and_caps_threads(tmp_path):
    """What app.batch.execute relies on (Taichi 1.7.4): TI_CPU_MAX_NUM_THREADS caps the cpu threads;
    `engine.backend.stop` writes the offline cache; a job in a restarted Taichi finds its kernels there
    (no new cache entry), while a second set of fields in the same program compiles new instances."""
    code = """if True:
        import json, os, pathlib, numpy as np, taichi as ti
        from engine import backend, taichi_private
        from engine.checks.affine_problem import AffineProblem
        cache = pathlib.Path(os.environ['TI_OFFLINE_CACHE_FILE_PATH'])
        def entries():
            return len(list(cache.rglob('*.tic')))
        def job(problems):
            backend.init('cpu')
            threads = taichi_private.cpu_threads()
            for _ in range(problems):
                AffineProblem(64).forward(np.ones(64, np.float32))
            backend.stop()
            return threads
        seen = {'threads': job(1), 'first': entries()}
        job(1)
        seen['again'] = entries()
        job(2)
        seen['two_sets_of_fields'] = entries()
        print(json.dumps(seen))
    """
    env = {**os.environ, "TI_CPU_MAX_NUM_THREADS": "1", "TI_OFFLINE_CACHE_FILE_PATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["threads"] == 1
    assert seen["first"] > 0 and seen["again"] == seen["first"]
    assert seen["two_sets_of_fields"] > seen["first"]


def test_a_job_on_a_backend_the_node_lacks_or_that_diverges_is_a_row():
    """In a worker process of its own (run_job restarts Taichi): --arch cuda without a GPU is the backend's
    error, not a cpu run; a fit whose loss leaves the floats is a diverged row; neither raises."""
    code = """if True:
        import json
        from app.batch.execute import run_job
        from app.batch.jobs import fit_jobs
        base = {"subdiv": 0, "iters": 3, "samples": 64}
        cuda = run_job(fit_jobs(["blob"], {}, base, "cuda", 1)[0])["row"]
        wild = run_job(fit_jobs(["blob"], {}, {**base, "lr": 1e30}, "cpu", 1)[0])["row"]
        print(json.dumps([cuda, wild]))
    """
    from engine.backend import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("this machine has a GPU: the cuda job would run")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=batch_env("rows"))
    assert result.returncode == 0, result.stderr
    cuda, wild = json.loads(result.stdout.strip().splitlines()[-1])
    assert cuda["status"] == "error" and cuda["error"].startswith("backend cuda is not available") and cuda["backend"] == ""
    assert wild["status"] == "diverged" and "diverged" in wild["error"] and wild["backend"] == "cpu"


def test_one_batch_per_output_folder(tmp_path):
    from app.batch.cli import _lock

    held = _lock(tmp_path)
    try:
        with pytest.raises(UserError, match=rf"--out {tmp_path} is in use by another batch \(pid {os.getpid()}\)"):
            _lock(tmp_path)
    finally:
        held.close()
    _lock(tmp_path).close()  # free again once the first run let go


@pytest.mark.parametrize("arch, gpus, expected", [("cuda", 2, 1), ("auto", 1, 1), ("cpu", 4, 0), ("cuda", 0, 0),
                                                  ("auto", 0, 0), ("vulkan", 1, 0)])
def test_a_task_asks_for_a_gpu_only_for_cuda_on_a_cluster_that_has_one(arch, gpus, expected):
    needs_ray()
    from app.batch.ray_session import task_options

    job = job_specs.fit_jobs(["blob"], {}, {}, arch, 3)[0]
    options = task_options(job, gpus, retries=2)
    assert options["num_gpus"] == expected and options["num_cpus"] == 3 and options["max_retries"] == 2
    assert options["retry_exceptions"] is False and options["name"] == "batch fit blob/default"


def test_a_fit_grid_sweeps_each_loss_terms_weight_as_the_fit_flag():
    """Every loss term's weight (app.scenes.fit_settings.LOSS_TERMS) is a grid key and a `batch fit` flag, and a job
    passes it on as the `fit` flag `--NAME-weight`, which the fit's own parser accepts."""
    from app.batch import cli
    from app.scenes.fit_settings import LOSS_TERMS

    assert {f"{term.name}_weight" for term in LOSS_TERMS} <= set(job_specs.FIT_KEYS)
    args = cli._parser().parse_args(["fit", "--targets", "blob", "--out", "o", "--grid", "edge_weight=0,0.01",
                                     "--chamfer-weight", "2", "--subdiv", "1", "--iters", "4"])
    jobs = cli._fit_jobs(args, "cpu")
    assert [job.settings["edge_weight"] for job in jobs] == [0.0, 0.01]
    argv = job_specs.fit_argv(jobs[1].settings, "cpu", "o")
    assert argv[argv.index("--edge-weight") + 1] == "0.01" and argv[argv.index("--chamfer-weight") + 1] == "2.0"
    assert job_specs.fit_settings(jobs[1]).weights == {"chamfer": 2.0, "edge": 0.01}
