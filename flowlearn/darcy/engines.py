"""The device-specific part of the pressure op: its forward solve, behind one small protocol.

:class:`~flowlearn.darcy.solve.PressureSolve` differentiates with device-agnostic torch operations that call the op
again, so the adjoint, forward mode and torch.func work the same on every device; only the forward solve
``solve_layout`` depends on where the tensors live:

* :class:`SparseEngine` -- the CPU: numpy/scipy assembly and a :class:`~flowlearn.linalg.reuse.SparseSolver`,
  one factorisation per batch item (each item keeps its own factor to reuse across steps);
* :class:`TorchEngine` -- a CUDA device: the batch is assembled with torch from the layout's index maps and solved
  in one call by a :class:`~flowlearn.linalg.gpu.GPUSolver` (one batched factorisation, or a batched PCG).
"""

from __future__ import annotations

import weakref
from typing import Protocol

import numpy as np
import torch

from flowlearn.darcy.assembly import SystemLayout
from flowlearn.linalg.gpu import GPUSolver
from flowlearn.linalg.reuse import SparseSolver


class PressureEngine(Protocol):
    """Solves the pressure of a batch on one device."""

    device: torch.device

    def solve_layout(
        self,
        layout: SystemLayout,
        log_k: torch.Tensor,
        heads: torch.Tensor,
        flows: torch.Tensor,
        role: str,
    ) -> torch.Tensor:
        """Pressure (head, m) float64 (B, num_nodes), flat image order: the solution at free nodes, ``heads`` at
        Dirichlet nodes, NaN at inactive nodes.

        Args:
            layout: The problem's system layout.
            log_k: Log-conductivity (K in m/s), float64 (B, num_nodes) on ``device``, finite at active nodes.
            heads: Dirichlet heads (m), float64 (B, num_nodes).
            flows: Sources Q (m^3/s), float64 (B, num_nodes).
            role: What the solve is for ("state", "adjoint", "tangent"): solvers keep warm starts per role.
        """
        ...


class SparseEngine:
    """The CPU engine: per-item numpy assembly (cached by the layout) and a :class:`SparseSolver`."""

    device = torch.device("cpu")

    def __init__(self, solver: SparseSolver) -> None:
        self.solver = solver

    def solve_layout(
        self,
        layout: SystemLayout,
        log_k: torch.Tensor,
        heads: torch.Tensor,
        flows: torch.Tensor,
        role: str,
    ) -> torch.Tensor:
        log_k_nodes, head_nodes, flow_nodes = (x.numpy() for x in (log_k, heads, flows))
        pressure = np.where(layout.active_mask, head_nodes, np.nan)
        for slot in range(log_k_nodes.shape[0]):
            transmissibility, matrix = layout.system(slot, log_k_nodes[slot])
            rhs = layout.rhs(transmissibility, head_nodes[slot], flow_nodes[slot])
            pressure[slot, layout.free_nodes] = self.solver.solve(layout, slot, role, matrix, rhs)
        return torch.from_numpy(pressure)


class TorchEngine:
    """The device engine: batched torch assembly and one :class:`GPUSolver` call per batch.

    The last assembled batch of each layout is kept: the adjoint solve that follows a forward solve asks for the
    same matrices again, and handing the solver the very same values lets it reuse its factor.
    """

    def __init__(self, solver: GPUSolver) -> None:
        self.solver = solver
        self.device = solver.device
        self._last: weakref.WeakKeyDictionary[SystemLayout, tuple[torch.Tensor, ...]] = (
            weakref.WeakKeyDictionary()
        )

    def solve_layout(
        self,
        layout: SystemLayout,
        log_k: torch.Tensor,
        heads: torch.Tensor,
        flows: torch.Tensor,
        role: str,
    ) -> torch.Tensor:
        last = self._last.get(layout)
        if last is not None and last[0].shape == log_k.shape and torch.equal(last[0], log_k):
            transmissibility, values = last[1], last[2]
        else:
            transmissibility = layout.torch_transmissibilities(log_k)
            values = layout.torch_matrix_values(transmissibility)
            self._last[layout] = (log_k.clone(), transmissibility, values)
        rhs = layout.torch_rhs(transmissibility, heads, flows)
        solution = self.solver.solve(layout, layout.indptr, layout.indices, values, rhs, role)
        free_nodes = layout.torch_index_maps(log_k.device)[3]
        active = layout.torch_tensors(log_k.device)[5]
        pressure = torch.where(active, heads, torch.nan)
        return pressure.index_copy(1, free_nodes, solution)


_TORCH_ENGINES: weakref.WeakKeyDictionary[GPUSolver, TorchEngine] = weakref.WeakKeyDictionary()


def engine_for(solver: SparseSolver | GPUSolver) -> PressureEngine:
    """The engine that runs ``solver``'s forward solves (one per GPU solver, so its assembly cache persists)."""
    if isinstance(solver, SparseSolver):
        return SparseEngine(solver)
    if solver not in _TORCH_ENGINES:
        _TORCH_ENGINES[solver] = TorchEngine(solver)
    return _TORCH_ENGINES[solver]
