"""Tape basics: record kernel launches on a tape, replay their adjoints for the gradient, take Adam steps.

L = sum(sin(2x + 0.5)) over 1,024 elements, as three kernel launches: the tape's backward
gives dL/dx = 2 cos(2x + 0.5), checked here against that formula; Adam, as device kernels,
then lowers L towards its minimum, -1,024.

    python examples/tape_basics.py                      # then a window plots dL/dx against the formula
    python examples/tape_basics.py --arch vulkan --headless
"""

import numpy as np
import taichi as ti

from app.flags import example_parser
from engine import backend
from engine.autodiff.tape import Tape
from engine.fields import FieldGroup
from engine.kernels.elementwise import affine, sin_map, sum_into  # y = a*x + b, z = sin(y), total += sum(values)
from engine.launch import launch
from engine.optim import Adam

if __name__ == "__main__":
    args = example_parser(__doc__).parse_args()         # --arch, --headless
    print(f"backend: {backend.init(args.arch).name}")

    group = FieldGroup()                                # fields allocated together, freed together
    x, y, z = (group.field(ti.f32, (1024,), needs_grad=True) for _ in range(3))
    loss = group.field(ti.f32, (), needs_grad=True)
    group.finalize()
    x.from_numpy(np.linspace(-2.0, 2.0, 1024, dtype=np.float32))
    start = x.to_numpy()

    tape, optimiser, losses = Tape(), Adam([x], lr=0.05), []
    for it in range(200):
        tape.reset()                                    # zero the gradients, forget the launches
        loss.fill(0)
        with tape:                                      # every launch(...) inside is recorded
            launch(affine, x, y, 2.0, 0.5)
            launch(sin_map, y, z)
            launch(sum_into, z, loss)
        tape.backward(loss)                             # adjoints in reverse: x.grad on the device
        losses.append(loss[None])
        if it == 0:
            grad = x.grad.to_numpy()                    # dL/dx at the start, checked below
        optimiser.step()                                # Adam as kernels: no host round trip

    expected = 2.0 * np.cos(2.0 * start + 0.5)
    error = float(np.abs(grad - expected).max())
    print(f"dL/dx = 2 cos(2x + 0.5): max |tape - formula| = {error:.2e}")
    print(f"200 Adam steps: L = {losses[0]:.1f} -> {losses[-1]:.1f} (minimum -1024)")
    if not args.headless:
        from app.ui.viewer import show_curves

        show_curves("tape_basics: dL/dx", start, {"dL/dx (tape)": grad, "2 cos(2x + 0.5)": expected})
    if error > 1e-5 or losses[-1] > -1000.0:
        raise SystemExit("tape_basics: the gradient or the descent is wrong")
