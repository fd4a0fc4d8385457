"""Spreading a parallel loop's blocks over every thread of the CPU backend.

Taichi 1.7.4's CPU backend cuts a parallel range-for into one contiguous chunk per pool thread,
of at least CPU_MIN_CHUNK iterations, whatever `loop_config(block_dim=...)` asks: a loop of up to
512 iterations runs on one thread, a longer one in static halves on two threads, and a half
whose iterations cost more than the other's holds the launch up (tests/test_cpu_pool.py
checks this; docs/DESIGN.md). A loop over `span` iterations whose iteration j takes block
`spread_block(j, threads, chunk)` (nothing where that is past the last block) puts blocks
t, t + threads, t + 2 threads, ... on thread t: every thread gets its share of a small loop,
and of each stretch of a loop whose cost varies along it. `engine.cpu_pool.loop_spread` gives
span, chunk and threads; on a GPU backend threads = 1 and chunk = span = the blocks, so
iteration j takes block j.
"""
import taichi as ti

CPU_MIN_CHUNK = 512  # fewest iterations Taichi 1.7.4's CPU backend gives one thread of a range-for


@ti.func
def spread_block(j, threads, chunk):
    """The block iteration j of a spread loop takes: thread j // chunk takes every threads-th block."""
    return j // chunk + (j % chunk) * threads
