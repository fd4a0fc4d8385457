"""The shape fit's loss interface (`Loss`) and the weighted sum of its terms (`WeightedSum`).

A term is a scalar function of the mesh's vertices on the device, evaluated in two parts, as PyTorch3D's losses
are composed but on a tape of launches:

    term.correspond()          # untaped work the term needs first (Chamfer: closest points through the BVH)
    with tape:
        term.record(tape)      # taped launches that leave the term in `term.value`, a 0-d field
    tape.backward(term.value)  # its gradient lands in the vertices' `.grad`
    term.destroy()             # its fields (and BVHs) freed

`WeightedSum([(w0, t0), (w1, t1), ...])` is itself a `Loss`: sum_k w_k t_k.value, added in the order given by one
launch (`engine.kernels.reduce.weighted_sum`): no float atomics between terms, so the total and its gradient are the
same bits every run. A sum of one term of weight 1 is that term bit for bit (0 + 1 * v = v). With `history=K` it
also keeps each evaluation's total in a K-slot device array (`record(tape, slot)`), so a loop reads K losses in one
wait instead of waiting on the device every iteration.

The shape fit builds its terms from `app.scenes.fit_settings.LOSS_TERMS` ("module:Class" rows): each class has a
classmethod `for_fit(inputs: FitInputs)`. A new term is a module with such a class plus one row in that table.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import taichi as ti

from engine.autodiff.tape import Tape
from engine.fields import FieldGroup
from engine.kernels import reduce
from engine.launch import launch
from engine.mesh_io import Mesh


class Loss:
    """One scalar term of a loss on the device (see the module docstring).

    Subclasses set `value` (a 0-d field with `needs_grad`, in the vertices' dtype) and implement `record` and
    `destroy`; the other methods default to a term with no untaped work and no search state.
    """

    value: Any

    def correspond(self, look: bool = False) -> None:
        """Untaped work before `record` (inside a tape, recorded as a step with no adjoint).

        `look`: this evaluation only looks at the gradient; a term that keeps a schedule across
        evaluations (Chamfer's BVH re-sorts) leaves it where it was."""

    def record(self, tape: Tape) -> None:
        """Taped: the launches that leave the term in `self.value`."""
        raise NotImplementedError

    def restart_at_current_vertices(self) -> None:
        """Drop what earlier evaluations left (search hints, schedules): answer as a new term would."""

    def misses(self) -> int:
        """Searches without an answer so far (a term without searches: 0)."""
        return 0

    def destroy(self) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class FitInputs:
    """What a shape fit's term may be built from: the vertices (vec3 field (V,), `needs_grad`), the triangles
    ((F, 3) int), the normalised target mesh, the target samples' count and seed."""

    x: Any
    faces: np.ndarray
    target: Mesh
    n_samples: int
    seed: int


def build_term(loss: str, inputs: FitInputs) -> Loss:
    """The term `loss` names ("module:Class", a row of `LOSS_TERMS`), built by its class's `for_fit`."""
    module, name = loss.split(":")
    return getattr(importlib.import_module(module), name).for_fit(inputs)


class WeightedSum(Loss):
    """sum_k w_k term_k, in the order given; it owns its terms (and destroys them).

    Example:
        >>> import taichi as ti
        >>> from engine import backend, meshgen
        >>> from engine.edge_loss import EdgeLengthLoss
        >>> _ = backend.init("cpu")
        >>> sphere, faces = meshgen.icosphere(1)
        >>> group = FieldGroup()
        >>> x = group.vector(3, ti.f32, (len(sphere),), needs_grad=True)
        >>> _ = group.finalize()
        >>> x.from_numpy(sphere.astype("float32"))
        >>> loss, tape = WeightedSum([(0.5, EdgeLengthLoss(x, faces))]), Tape()
        >>> with tape:
        ...     loss.correspond()
        ...     loss.record(tape)
        >>> tape.backward(loss.value)
        >>> round(float(loss.value[None]) / float(loss.terms[0][1].value[None]), 6), x.grad.to_numpy().shape
        (0.5, (42, 3))
        >>> loss.destroy(); group.destroy()
    """

    def __init__(self, terms: Sequence[tuple[float, Loss]], history: int = 1):
        if not terms:
            raise ValueError("a weighted sum needs at least one term")
        self.terms = [(float(weight), term) for weight, term in terms]
        self.group = FieldGroup()
        self.value = self.group.field(self.terms[0][1].value.dtype, (), needs_grad=True)
        self.weights = self.group.field(ti.f64, (len(self.terms),))
        self.history = self.group.field(self.value.dtype, (max(int(history), 1),))  # totals not yet read: `record`
        self.group.finalize()
        self.weights.from_numpy(np.array([weight for weight, _ in self.terms], np.float64))

    def correspond(self, look: bool = False) -> None:
        for _, term in self.terms:
            term.correspond(look)

    def record(self, tape: Tape, slot: int = -1) -> None:
        """Taped: the terms, then their weighted sum into `value`; with `slot` >= 0 the total also goes into
        `history[slot]` (on the device: read it later, many slots in one wait)."""
        for _, term in self.terms:
            term.record(tape)
        launch(reduce.weighted_sum, tuple(term.value for _, term in self.terms), self.weights, self.value,
               self.history, slot, name="loss: weighted sum")

    def restart_at_current_vertices(self) -> None:
        for _, term in self.terms:
            term.restart_at_current_vertices()

    def misses(self) -> int:
        return sum(term.misses() for _, term in self.terms)

    def destroy(self) -> None:
        for _, term in self.terms:
            term.destroy()
        self.group.destroy()
