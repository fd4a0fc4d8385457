"""Reverse-mode machinery: the tape, hazard analysis, custom adjoints, gradcheck; the optimisers' update kernels
(their host side, which allocates their state, is engine.optim)."""
from engine import kernel_source_info as _kernel_source_info

_kernel_source_info.install()  # before any kernel here is defined: cheaper kernel loads (its docstring)

