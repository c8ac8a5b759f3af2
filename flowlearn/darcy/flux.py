"""Flow rates derived from a solved pressure: what a fracture is measured by.

The flow from free node a into Dirichlet node b along edge e is the edge's term of the free-node equation,

    q_e = T_e * (h_a - h_b),        T_e = aol_e * exp((logK_a + logK_b) / 2)

for a scalar conductivity (the edges and their T_e of the per-axis and tensor forms likewise; see
:mod:`flowlearn.darcy.conductivity`), so the flow rate out through a set of Dirichlet nodes (the outlet face) is the
sum of q_e over the edges that reach it. Built from torch ops on ``log_k`` and on the pressure of
:func:`~flowlearn.darcy.solve.solve_pressure`, it is differentiable in ``log_k`` through both, to any order.

Units: with K in m/s and heads in metres, q is in m^3/s. For a fracture solved with log K = log(Ap^3/12) (Ap in
metres), unit thickness and unit pixel size (square maps; see :meth:`DarcyProblem.fracture`), it is the transmissivity-weighted head drop in m^3 per unit of
(head / viscosity) that the data's ``flow_rate`` attribute stores (see :mod:`flowlearn.data.schema`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from flowlearn.darcy.assembly import SystemLayout
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import system_field


def _edge_flows(
    log_k: torch.Tensor,
    pressure: torch.Tensor,
    problem: DarcyProblem,
    select: Callable[[SystemLayout], np.ndarray],
) -> tuple[torch.Tensor, np.ndarray, bool]:
    """The flows T_e (h_a - h_b) (B, E') along the edges ``select(layout)`` picks (indices into the layout of
    log_k's form), those indices, and whether log_k is unbatched."""
    target, values = system_field(log_k, problem)
    unbatched = tuple(log_k.shape) == problem.grid.shape
    layout = target.layout
    edges = select(layout)
    index = torch.as_tensor(edges, device=values.device)
    node_a, node_b = (nodes[index] for nodes in layout.torch_tensors(values.device)[:2])
    flat_p = pressure.reshape(values.shape[0], -1)
    transmissibility = layout.torch_transmissibilities(values.reshape(values.shape[0], -1), index)
    return transmissibility * (flat_p[:, node_a] - flat_p[:, node_b]), layout.edges[edges], unbatched


def boundary_flow_rate(
    log_k: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem, boundary: np.ndarray
) -> torch.Tensor:
    """Flow rate from the free nodes into the Dirichlet nodes marked by ``boundary``.

    Args:
        log_k: the conductivity the pressure was solved with, in any form of
            :func:`~flowlearn.darcy.solve.solve_pressure`, float64.
        pressure: the solved heads, same shape (NaN at inactive nodes is fine: those nodes have no edges).
        problem: the problem both were solved on.
        boundary: bool (grid.shape), the Dirichlet nodes whose inflow is summed (others are ignored).

    Returns:
        float64 tensor (B,), or a 0-d tensor for unbatched inputs; positive where flow leaves through ``boundary``.
    """
    reaching = np.asarray(boundary, dtype=bool).reshape(-1)

    def into_boundary(layout: SystemLayout) -> np.ndarray:
        # Free-Dirichlet edges, free end first.
        edges = np.arange(layout.num_free_edges, layout.edges.shape[0])
        return edges[reaching[layout.edges[edges, 1]]]

    flows, _, unbatched = _edge_flows(log_k, pressure, problem, into_boundary)
    rate = flows.sum(dim=1)
    return rate[0] if unbatched else rate


def outlet_flow_rate(log_k: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
    """Flow rate out through the last column (the outlet of :meth:`DarcyProblem.fracture`); see
    :func:`boundary_flow_rate` for shapes and units."""
    outlet = np.zeros(problem.grid.shape, dtype=bool)
    outlet[..., -1] = True
    return boundary_flow_rate(log_k, pressure, problem, outlet & problem.dirichlet)


def column_flow_rates(log_k: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
    """Flow rate from each column (x index) into the next, summed over the problem's edges between them.

    Each edge carries its term of the free-node equations, ``T_e * (h_a - h_b)``, over the edges of ``problem``
    (both ends active) that cross from one column to the next (the tensor form's diagonals among them). In the
    Darcy solution of a problem whose only Dirichlet nodes are the first and last columns and which has no sources
    (:meth:`DarcyProblem.fracture`), every column passes the same flow rate, the outlet's
    (:func:`outlet_flow_rate`), whatever log K is. For a pressure that is not the solution for this log K (a
    reference computed otherwise), the rates differ from column to column.

    Args:
        log_k: the conductivity, in any form of :func:`~flowlearn.darcy.solve.solve_pressure`, float64.
        pressure: heads, same shape; only active nodes are read.
        problem: the problem whose edges and areas over lengths count (its ``active`` mask decides the edges).

    Returns:
        float64 tensor (B, W - 1), or (W - 1,) for unbatched inputs: entry c is the flow rate from column c into
        column c + 1 (positive along +x), in :func:`boundary_flow_rate`'s units.
    """
    width = problem.grid.shape[-1]

    def across(layout: SystemLayout) -> np.ndarray:
        # Nodes are flat image indices, so the column of a node is its index modulo the width; the other edges
        # join nodes of one column.
        column_a, column_b = layout.edges.T % width
        return np.flatnonzero(column_a != column_b)

    flows, edges, unbatched = _edge_flows(log_k, pressure, problem, across)
    column_a, column_b = edges.T % width
    rightward = torch.as_tensor(column_b - column_a, dtype=flows.dtype, device=flows.device)
    edge_flux = rightward * flows
    left = torch.as_tensor(np.minimum(column_a, column_b), device=flows.device)
    rate = torch.zeros(flows.shape[0], width - 1, dtype=edge_flux.dtype, device=flows.device)
    rate = rate.index_add(1, left, edge_flux)
    return rate[0] if unbatched else rate
