"""engine.cpu_pool: Taichi's CPU pool workers pinned one per core, and only where that is safe.

Each case starts the backend in a fresh process (the pool belongs to the process) and reports
what it sees: the pool's width, the cores the process may use, the pinned workers, each
worker's affinity, and whether every worker ran during a parallel launch (the Taichi
behaviour `pin_workers` relies on to find them: every worker wakes for every parallel loop)."""
import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, sys
if len(sys.argv) > 1:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import numpy as np
import taichi as ti
from engine import backend, cpu_pool
from engine.kernels.thread_pool import wake_workers
from engine.launch import launch
backend.init("cpu")
pinned = cpu_pool.pinned()
ran = {tid: cpu_pool._run_ns(tid) for tid in pinned}
out = np.zeros(4096, np.int32)
launch(wake_workers, out)
ti.sync()
print(json.dumps({
    "width": ti.lang.impl.current_cfg().cpu_max_num_threads,
    "cores": sorted(os.sched_getaffinity(0)),
    "pinned": {str(tid): core for tid, core in pinned.items()},
    "affinity": {str(tid): sorted(os.sched_getaffinity(tid)) for tid in pinned},
    "all_ran": all(cpu_pool._run_ns(tid) > ran[tid] for tid in pinned),
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
