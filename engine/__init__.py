"""Host-side engine: backend selection, parity, mesh I/O and the glue that launches kernels.

Device math lives in `engine.kernels` (and adjoints/optimisers in `engine.autodiff`);
modules here only allocate, launch and move data.
"""
