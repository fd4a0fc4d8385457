"""Compare two backends: the same frame rendered on two of them (cpu, vulkan, cuda), pixel by pixel.

Taichi runs one backend per process, so each backend runs in a `BackendWorker`: a child
process that starts it once and answers named computations ("raymarch_frame" here) with
numpy arrays. A script that starts workers must do so under `if __name__ == "__main__":`,
because the child process imports the script again. The frames must agree within the
project's parity figures (app/claims/thresholds.py).

    python examples/compare_backends.py                 # cpu vs vulkan; then a window shows |A - B|
    python examples/compare_backends.py --arch cuda --parity-arch cpu --headless
"""
import numpy as np

from app.claims.thresholds import PIXEL_ATOL, PIXEL_MAX_ERR, PIXEL_MIN_SHARE
from app.flags import example_parser
from engine import backend, image_io
from engine.parity import compare
from engine.worker import BackendWorker

if __name__ == "__main__":
    parser = example_parser(__doc__)                    # --arch (backend A), --headless
    parser.add_argument("--parity-arch", choices=backend.ARCH_CHOICES[1:], default=None,
                        help="backend B (default: vulkan beside the cpu, else the cpu)")
    args = parser.parse_args()
    arch, parity_arch = backend.resolve_archs(args.arch, args.parity_arch)   # checked before anything starts

    frame = {"t": 0.5, "width": 192, "height": 96}
    with BackendWorker(arch) as a, BackendWorker(parity_arch) as b:
        print(f"backends: {a.backend['arch']} (A) and {b.backend['arch']} (B), each in its own process")
        rgb_a = a.call("raymarch_frame", **frame)["rgb"]
        rgb_b = b.call("raymarch_frame", **frame)["rgb"]
    report = compare(rgb_a, rgb_b, PIXEL_ATOL)           # every value of linear RGB
    print(f"A vs B: {report.summary()}")
    print(f"bit-identical values: {np.mean(rgb_a == rgb_b):.1%}")
    if not args.headless:
        from app.ui.viewer import show_image

        row = np.concatenate([image_io.srgb8(rgb_a), image_io.diff_heatmap(rgb_a, rgb_b, PIXEL_ATOL)], axis=1)
        show_image("compare_backends: frame A, and |A - B| (bright: outside 1e-4)", row)
    if report.share_within < PIXEL_MIN_SHARE or report.max_abs_err > PIXEL_MAX_ERR:
        raise SystemExit("compare_backends: the backends disagree beyond the parity figures")
