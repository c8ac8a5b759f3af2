"""Flow rates derived from a solved pressure: what a fracture is measured by.

The flow from free node a into Dirichlet node b along edge e is the edge's term of the free-node equation,

    q_e = T_e * (h_a - h_b),        T_e = aol_e * exp((logK_a + logK_b) / 2),

so the flow rate out through a set of Dirichlet nodes (the outlet face) is the sum of q_e over the edges that
reach it. Built from torch ops on ``log_k`` and on the pressure of :func:`~flowlearn.darcy.solve.solve_pressure`,
it is differentiable in ``log_k`` through both, to any order.

Units: with K in m/s and heads in metres, q is in m^3/s. For a fracture solved with log K = log(Ap^3/12) (Ap in
metres), unit thickness and unit pixel size (square maps; see :meth:`DarcyProblem.fracture`), it is the transmissivity-weighted head drop in m^3 per unit of
(head / viscosity) that the data's ``flow_rate`` attribute stores (see :mod:`flowlearn.data.schema`).
"""

from __future__ import annotations

import numpy as np
import torch

from flowlearn.darcy.problem import DarcyProblem


def boundary_flow_rate(
    log_k: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem, boundary: np.ndarray
) -> torch.Tensor:
    """Flow rate from the free nodes into the Dirichlet nodes marked by ``boundary``.

    Args:
        log_k: node log-conductivity, (B, *grid.shape) or grid.shape, float64; the one the pressure was solved with.
        pressure: the solved heads, same shape (NaN at inactive nodes is fine: those nodes have no edges).
        problem: the problem both were solved on.
        boundary: bool (grid.shape), the Dirichlet nodes whose inflow is summed (others are ignored).

    Returns:
        float64 tensor (B,), or a 0-d tensor for unbatched inputs; positive where flow leaves through ``boundary``.
    """
    unbatched = tuple(log_k.shape) == problem.grid.shape
    flat_k = log_k.reshape(1 if unbatched else log_k.shape[0], -1)
    flat_p = pressure.reshape(flat_k.shape)
    layout = problem.layout
    edges = slice(layout.num_free_edges, None)  # free-Dirichlet edges, free end first
    node_a, node_b = layout.edges[edges].T
    reaching = np.asarray(boundary, dtype=bool).reshape(-1)[node_b]
    index = [torch.as_tensor(x[reaching], device=flat_k.device) for x in (node_a, node_b)]
    aol = torch.as_tensor(layout.areas_over_lengths[edges][reaching], device=flat_k.device)
    transmissibility = aol * torch.exp(0.5 * (flat_k[:, index[0]] + flat_k[:, index[1]]))
    rate = (transmissibility * (flat_p[:, index[0]] - flat_p[:, index[1]])).sum(dim=1)
    return rate[0] if unbatched else rate


def outlet_flow_rate(log_k: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
    """Flow rate out through the last column (the outlet of :meth:`DarcyProblem.fracture`); see
    :func:`boundary_flow_rate` for shapes and units."""
    outlet = np.zeros(problem.grid.shape, dtype=bool)
    outlet[..., -1] = True
    return boundary_flow_rate(log_k, pressure, problem, outlet & problem.dirichlet)


def column_flow_rates(log_k: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
    """Flow rate from each column (x index) into the next, summed over the problem's edges between them.

    Each edge carries its term of the free-node equations, ``T_e * (h_a - h_b)`` with ``T_e = aol_e * exp((logK_a
    + logK_b) / 2)``, over the edges of ``problem`` (both ends active). In the Darcy solution of a problem whose
    only Dirichlet nodes are the first and last columns and which has no sources (:meth:`DarcyProblem.fracture`),
    every column passes the same flow rate, the outlet's (:func:`outlet_flow_rate`), whatever log K is. For a
    pressure that is not the solution for this log K (a reference computed otherwise), the rates differ from
    column to column.

    Args:
        log_k: node log-conductivity, (B, *grid.shape) or grid.shape, float64.
        pressure: heads, same shape; only active nodes are read.
        problem: the problem whose edges and areas over lengths count (its ``active`` mask decides the edges).

    Returns:
        float64 tensor (B, W - 1), or (W - 1,) for unbatched inputs: entry c is the flow rate from column c into
        column c + 1 (positive along +x), in :func:`boundary_flow_rate`'s units.
    """
    unbatched = tuple(log_k.shape) == problem.grid.shape
    flat_k = log_k.reshape(1 if unbatched else log_k.shape[0], -1)
    flat_p = pressure.reshape(flat_k.shape)
    layout = problem.layout
    width = problem.grid.shape[-1]
    # Nodes are flat image indices, so the column of a node is its index modulo the width.
    column_a, column_b = layout.edges.T % width
    across = column_a != column_b  # the edges along x; the others join nodes of one column
    node_a, node_b = (torch.as_tensor(nodes[across], device=flat_k.device) for nodes in layout.edges.T)
    rightward = torch.as_tensor(column_b[across] - column_a[across], dtype=flat_k.dtype, device=flat_k.device)
    aol = torch.as_tensor(layout.areas_over_lengths[across], device=flat_k.device)
    transmissibility = aol * torch.exp(0.5 * (flat_k[:, node_a] + flat_k[:, node_b]))
    edge_flux = rightward * transmissibility * (flat_p[:, node_a] - flat_p[:, node_b])
    left = torch.as_tensor(np.minimum(column_a, column_b)[across], device=flat_k.device)
    rate = torch.zeros(flat_k.shape[0], width - 1, dtype=edge_flux.dtype, device=flat_k.device)
    rate = rate.index_add(1, left, edge_flux)
    return rate[0] if unbatched else rate
