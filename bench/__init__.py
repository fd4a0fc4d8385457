"""Benchmarks: our kernels beside NVIDIA Warp (optional `bench` extra), same data, same run.

Each module has `main(argv) -> int`, prints a table, and validates equal answers before timing.
"""
