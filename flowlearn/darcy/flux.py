"""Flow rates derived from a solved pressure: what a fracture is measured by.

The flow from free node a into Dirichlet node b along edge e is the edge's term of the free-node equation,

    q_e = T_e * (h_a - h_b),        T_e = aol_e * exp((logK_a + logK_b) / 2),

so the flow rate out through a set of Dirichlet nodes (the outlet face) is the sum of q_e over the edges that
reach it. Built from torch ops on ``log_k`` and on the pressure of :func:`~flowlearn.darcy.solve.solve_pressure`,
it is differentiable in ``log_k`` through both, to any order.

Units: with K in m/s and heads in metres, q is in m^3/s. For a fracture solved with log K = log(Ap^3/12) (Ap in
metres), unit thickness and nodes one pixel apart (``DarcyProblem.fracture(..., unit_spacing=True)``), it is the transmissivity-weighted head drop in m^3 per unit of
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
