"""The edge-length regulariser of a mesh on the device: the mean squared edge length, on the tape.

    loss = EdgeLengthLoss(x, faces)    # x: vec3 field (V,), needs_grad; faces: (F, 3) int
    with tape:
        loss.record(tape)              # taped: squared lengths, then their fixed-order mean into loss.value
    tape.backward(loss.value)          # d loss / d x lands in x.grad

loss = (1/E) sum over the mesh's E unique edges (a, b) of |x_a - x_b|^2: PyTorch3D's `mesh_edge_loss` with
its default target length 0, for one mesh. Beside Chamfer it keeps the edges short and even, so vertices spread
over the surface instead of bunching (weight `--edge-weight`). It has no untaped work. The device math and its
fixed-order adjoint: engine.kernels.edge_length; the mean: engine.kernels.reduce.sum_into (fixed order), so one
backend gives the same bits run to run.
"""
from __future__ import annotations

import numpy as np
import taichi as ti

from engine.autodiff.grad_kernels import fill_value
from engine.autodiff.tape import Tape
from engine.errors import UserError
from engine.fields import FieldGroup
from engine.fit_loss import FitInputs, Loss
from engine.kernels import edge_length, reduce
from engine.launch import launch


def unique_edges(faces: np.ndarray) -> np.ndarray:
    """The mesh's edges, each once as (a, b) with a < b, sorted: (E, 2) int."""
    faces = np.asarray(faces)
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    return np.unique(np.sort(edges, axis=1), axis=0)


class EdgeLengthLoss(Loss):
    """The mean squared edge length of the mesh (x, faces) (see the module docstring).

    Args:
        x: the vertices, a Taichi vec3 field (V,) of float32 or float64 with `needs_grad=True`.
        faces: the triangles, (F, 3) int, indices into `x`.

    Attributes:
        value: the loss, a 0-d field in `x`'s dtype.

    Example:
        >>> import taichi as ti
        >>> from engine import backend, meshgen
        >>> _ = backend.init("cpu")
        >>> sphere, faces = meshgen.icosphere(0)
        >>> group = FieldGroup()
        >>> x = group.vector(3, ti.f32, (len(sphere),), needs_grad=True)
        >>> _ = group.finalize()
        >>> x.from_numpy(sphere.astype("float32"))
        >>> loss, tape = EdgeLengthLoss(x, faces), Tape()
        >>> with tape:
        ...     loss.record(tape)
        >>> tape.backward(loss.value)
        >>> round(float(loss.value[None]), 4), loss.n_edges      # the icosahedron's edge, squared: 1.1056
        (1.1056, 30)
        >>> loss.destroy(); group.destroy()
    """

    def __init__(self, x, faces: np.ndarray):
        edges = unique_edges(faces)
        if len(edges) == 0:
            raise UserError("the edge-length loss needs a mesh with at least one face")
        n = x.shape[0]
        ends = edges.ravel()  # end 2e + k is edge e's k-th vertex
        order = np.argsort(ends, kind="stable")  # by vertex, then by edge: the adjoint's fixed order
        start = np.searchsorted(ends[order], np.arange(n + 1))
        self.x, self.n_edges = x, len(edges)
        g = self.group = FieldGroup()
        self.edges = g.vector(2, ti.i32, (self.n_edges,))
        self.start = g.field(ti.i32, (n + 1,))
        self.incident = g.field(ti.i32, (len(ends),))
        self.lengths = g.field(x.dtype, (self.n_edges,), needs_grad=True)
        self.partial = g.field(x.dtype, (-(-self.n_edges // reduce.BLOCK),))
        self.value = g.field(x.dtype, (), needs_grad=True)
        g.finalize()
        self.edges.from_numpy(edges.astype(np.int32))
        self.start.from_numpy(start.astype(np.int32))
        self.incident.from_numpy((order // 2).astype(np.int32))

    @classmethod
    def for_fit(cls, inputs: FitInputs) -> "EdgeLengthLoss":
        return cls(inputs.x, inputs.faces)

    def record(self, tape: Tape) -> None:
        """Taped: the squared edge lengths and their fixed-order mean into `self.value`."""
        with tape.pause():
            launch(fill_value, self.value, 0)
        launch(edge_length.squared_lengths, self.x, self.edges, self.start, self.incident, self.lengths,
               name="edge: squared lengths")
        launch(reduce.sum_into, self.lengths, self.n_edges, 1.0 / self.n_edges, self.partial, self.value,
               name="edge: mean")

    def destroy(self) -> None:
        self.group.destroy()
