"""engine.cpu_pool: Taichi's CPU pool workers pinned one per core, and only where that is safe.

Each case starts the backend in a fresh process (the pool belongs to the process) and reports
what it sees: the pool's width, the cores the process may use, the pinned workers, each
worker's affinity, and whether every worker ran during a parallel launch (the Taichi
behaviour `pin_workers` relies on to find them: every worker wakes for every parallel loop)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, os, sys, time
if len(sys.argv) > 1:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import numpy as np
import taichi as ti
from engine import backend, cpu_pool, taichi_private
from engine.kernels.thread_pool import wake_workers
from engine.launch import launch
backend.init("cpu")
pinned = cpu_pool.pinned()
ran = {tid: cpu_pool._run_ns(tid) for tid in pinned}
out = np.zeros(4096, np.int32)
deadline = time.monotonic() + 5.0
while True:  # a woken worker may not be scheduled before the launching thread has done every block
    launch(wake_workers, out)
    ti.sync()
    all_ran = all(cpu_pool._run_ns(tid) > ran[tid] for tid in pinned)
    if all_ran or time.monotonic() > deadline:
        break
    time.sleep(0.001)
print(json.dumps({
    "width": taichi_private.cpu_threads(),
    "cores": sorted(os.sched_getaffinity(0)),
    "pinned": {str(tid): core for tid, core in pinned.items()},
    "affinity": {str(tid): sorted(os.sched_getaffinity(tid)) for tid in pinned},
    "all_ran": all_ran,
    "loop_ok": bool((out == np.arange(4096)).all()),
}))
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pinning uses /proc and affinity")


def probe(*args: str, env: dict | None = None) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@linux_only
def test_workers_pinned_one_per_core():
    seen = probe(env={"SHANNON_PIN_THREADS": "1"})
    assert seen["loop_ok"]
    if seen["width"] < 2 or seen["width"] != len(seen["cores"]):
        assert seen["pinned"] == {}
        pytest.skip(f"pool of {seen['width']} on cores {seen['cores']}: pinning is not meant to happen here")
    assert sorted(seen["pinned"].values()) == seen["cores"]  # every allowed core, each once
    assert all(seen["affinity"][tid] == [core] for tid, core in seen["pinned"].items())
    assert seen["all_ran"], "a pinned thread did not run during a parallel launch: not a pool worker"


@linux_only
def test_switch_off_leaves_the_pool_alone():
    assert probe(env={"SHANNON_PIN_THREADS": "0"})["pinned"] == {}


@linux_only
def test_not_pinned_when_the_process_may_not_use_every_core():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two or more cores")
    seen = probe("one-core", env={"SHANNON_PIN_THREADS": "1"})
    assert seen["cores"] == [min(os.sched_getaffinity(0))] and seen["pinned"] == {} and seen["loop_ok"]


@linux_only
def test_not_pinned_for_a_one_thread_pool():
    seen = probe(env={"SHANNON_PIN_THREADS": "1", "TI_CPU_MAX_NUM_THREADS": "1"})
    assert seen["width"] == 1 and seen["pinned"] == {}


CHUNKS = """
import json
import numpy as np
import taichi as ti
from engine import backend, cpu_pool
from engine.kernels.spread import spread_block
backend.init("cpu")

@ti.func
def spin(i):
    s = 0.0
    for j in range(20000):
        s = ti.sqrt(s + ti.cast(i + j, ti.f32))
    return s

@ti.kernel
def plain(out: ti.types.ndarray(), n: ti.i32):
    for i in range(n):
        out[i] = spin(i)

@ti.kernel
def spread(out: ti.types.ndarray(), n: ti.i32, span: ti.i32, chunk: ti.i32, threads: ti.i32):
    for j in range(span):
        i = spread_block(j, threads, chunk)
        if i < n:
            out[i] = spin(i)

def share(run, launches=5):
    # the less busy worker's CPU time over the busier one's, during a launch: the most of `launches` launches (on a
    # loaded machine one worker can go unscheduled for a whole launch, and the other then takes every block)
    workers = list(cpu_pool.pinned())
    shares = []
    for _ in range(launches):
        before = [cpu_pool._run_ns(tid) for tid in workers]
        run()
        ti.sync()
        grew = sorted(cpu_pool._run_ns(tid) - ran for tid, ran in zip(workers, before))
        shares.append(grew[0] / grew[-1])
    return max(shares)

out = np.zeros(1024, np.float32)
plain(out, 8)
spread(out, 8, *cpu_pool.loop_spread(8))  # compiled before anything is counted
print(json.dumps({"workers": len(cpu_pool.pinned()),
                  "plain_512": share(lambda: plain(out, 512)), "plain_1024": share(lambda: plain(out, 1024)),
                  "spread_64": share(lambda: spread(out, 64, *cpu_pool.loop_spread(64))),
                  "all_done": bool((out[:1024] > 0).all())}))
"""


@linux_only
def test_cpu_range_for_gives_each_thread_one_chunk_of_at_least_512(tmp_path):
    """The Taichi behaviour engine/kernels/spread.py works around: a parallel range-for of 512
    iterations runs on one worker, one of 1024 on both; a spread loop of 64 blocks on both.
    Measured as each pinned worker's CPU time during the launch (not wall time), the most of five launches each: a
    loop that never reaches the second worker shows it in all five, one that does shows it once even on a loaded
    machine (a single launch failed this at load 7-14, the second worker unscheduled throughout)."""
    script = tmp_path / "chunks.py"  # a file: Taichi reads a kernel's source
    script.write_text(CHUNKS)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[1],
                            env={**os.environ, "SHANNON_PIN_THREADS": "1", "TI_CPU_MAX_NUM_THREADS": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    if seen["workers"] != 2:
        pytest.skip(f"needs a pool of two pinned workers (two allowed cores); found {seen['workers']}")
    assert seen["all_done"]
    assert seen["plain_512"] < 0.05, seen  # one worker did it all: the other only woke
    assert seen["plain_1024"] > 0.5 and seen["spread_64"] > 0.5, seen
