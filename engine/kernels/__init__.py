"""Every line of device math: Taichi kernels and functions, written once for all backends.

Nothing outside this package (and `engine.autodiff` for adjoints and optimisers)
computes on the device. Kernels take fields as `ti.template()` arguments (see
`engine.fields` for why fields) and scalars as typed arguments.
"""
from engine import kernel_source_info as _kernel_source_info

_kernel_source_info.install()  # before any kernel here is defined: cheaper kernel loads (its docstring)

