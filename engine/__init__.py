"""Host-side engine: backend selection, parity, mesh I/O and the glue that launches kernels.

Device math lives in `engine.kernels` (and adjoints/optimisers in `engine.autodiff`);
modules here only allocate, launch and move data.
"""

import os as _os

# Taichi prints a version banner on import; our reports record the version instead.
_os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "false")
