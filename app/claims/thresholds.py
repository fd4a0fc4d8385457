"""The figures the claims hold the backends to, defined once (Taichi-free: the desktop app's UI process imports them).

The `raymarch_parity` and `chamfer_adam` claims check them; the desktop app's parity panel
colours its readouts by them; `bench raymarch` validates the Warp port's frame with them;
tests use them where they assert the same thing.
"""

PIXEL_ATOL = 1e-4  # ray-march parity: a pixel agrees when each channel of linear RGB is within this...
PIXEL_MIN_SHARE = 0.9995  # ...and at least this share of the pixels agree (the brief: >= 99.95 %)...
PIXEL_MAX_ERR = 5e-2  # ...and no channel is off by more than this
GRAD_RTOL = 1e-3  # gradient parity across backends: max |g_A - g_B| <= GRAD_RTOL * max |g_A| (the brief)
