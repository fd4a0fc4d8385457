"""Reverse-mode machinery: gradcheck, and (with the tape issue) the tape and optimisers."""
from engine import kernel_source_info as _kernel_source_info

_kernel_source_info.install()  # before any kernel here is defined: cheaper kernel loads (its docstring)

