"""Squared edge lengths of a triangle mesh, with a fixed-order adjoint (the edge-length regulariser's device math).

`squared_lengths` writes |x[a] - x[b]|^2 per edge (a, b); `engine.edge_loss.EdgeLengthLoss` averages them
with the fixed-order `engine.kernels.reduce.sum_into`. Taichi's own adjoint would add each edge's gradient
into both end vertices with float atomics (a vertex has about six edges), whose order, and so whose last bits,
change run to run; `squared_lengths_adjoint` instead walks each vertex's edges in ascending edge order
through a vertex -> edge index (`start`, `incident`: CSR, built once on the host, the topology being fixed).
"""
import taichi as ti

from engine.autodiff.custom import custom_adjoint


@ti.kernel
def squared_lengths(x: ti.template(), edges: ti.template(), start: ti.template(), incident: ti.template(),
                    lengths: ti.template()):
    """lengths[e] = |x[a] - x[b]|^2 for each edge e = (a, b). `start`/`incident` are for the adjoint only."""
    for e in edges:
        d = x[edges[e][0]] - x[edges[e][1]]
        lengths[e] = d.dot(d)


@custom_adjoint(squared_lengths)
@ti.kernel
def squared_lengths_adjoint(x: ti.template(), edges: ti.template(), start: ti.template(), incident: ti.template(),
                            lengths: ti.template()):
    """x.grad[v] += sum over v's edges e, ascending, of 2 lengths.grad[e] (x[v] - x[the other end])."""
    for v in range(start.shape[0] - 1):
        acc = x.grad[v] * 0.0
        for i in range(start[v], start[v + 1]):
            e = incident[i]
            other = edges[e][0] + edges[e][1] - v
            acc += 2.0 * lengths.grad[e] * (x[v] - x[other])
        x.grad[v] += acc
