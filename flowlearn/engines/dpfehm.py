"""DPFEHM.jl as an engine (``solver=julia``), through juliacall and the Julia package ``julia/DPFEHMBridge``.

DPFEHMBridge builds DPFEHM's grid for a problem once (:meth:`DPFEHMEngine.prepare`) and solves the steady
groundwater equations with ``DPFEHM.groundwater_steadystate`` for given heads and sources: the forward, adjoint
and tangent solves of :class:`~flowlearn.darcy.solve.PressureSolve`, like every engine. A scalar conductivity
goes to Julia as node log-conductivities (DPFEHM takes the geometric means); a conductivity per axis, or a full
tensor's 9-point edges, as the transmissibility of each edge of flowlearn's layout (DPFEHM's per-edge
conductivities, with unit areas over lengths). The derivative rules are
therefore flowlearn's, applied to DPFEHM's solves, so the Julia path differentiates with respect to the Dirichlet
values and sources as well, and to any order.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from flowlearn.bridge.julia import runtime
from flowlearn.engines.base import Engine, check_count, check_tolerance
from flowlearn.errors import ForeignError, JuliaUnavailableError

if TYPE_CHECKING:
    from flowlearn.darcy.problem import DarcyProblem

# Where a source checkout keeps the Julia package that bridge/juliapkg.json declares as a dev path dependency.
BRIDGE_PACKAGE = Path(__file__).resolve().parents[2] / "julia" / "DPFEHMBridge"


class DPFEHMEngine(Engine):
    """Steady Darcy solves by DPFEHM.jl's algebraic multigrid, on the host.

    The constructor starts Julia and loads DPFEHMBridge, so a missing Julia fails here, at start-up, never in the
    middle of training. Tensors may live on any device: they are solved on the host and returned on theirs.

    Args:
        reltol: Relative residual to which DPFEHM's algebraic multigrid solves, in
            [:data:`~flowlearn.engines.base.FINEST_TOLERANCE`, 1).
        maxiter: Multigrid iteration limit; a solve that stops there without meeting ``reltol`` raises
            (DPFEHM itself would return silently).

    Raises:
        SettingError: an option out of its range, before Julia starts.
        JuliaUnavailableError: Julia, juliacall or the DPFEHMBridge package is not available; the message says
            how to install them.
    """

    name = "julia"
    device = None

    def __init__(self, reltol: float = 1e-12, maxiter: int = 1000) -> None:
        super().__init__()
        check_tolerance(reltol, "reltol")
        check_count(maxiter, "maxiter", low=1)
        if not (BRIDGE_PACKAGE / "Project.toml").is_file():
            raise JuliaUnavailableError(
                f"solver=julia needs Julia and the DPFEHMBridge package, which a flowlearn source checkout keeps "
                f"in julia/DPFEHMBridge; it is not at {BRIDGE_PACKAGE}. Clone flowlearn and install it with "
                "pip install -e '.[julia]'."
            )
        self._julia = runtime("solver=julia")
        self.reltol, self.maxiter = float(reltol), maxiter
        try:
            with self._julia.lock:
                self._bridge = self._julia.juliacall.Main.seval("import DPFEHMBridge; DPFEHMBridge")
        except self._julia.juliacall.JuliaError as error:
            raise JuliaUnavailableError(
                f"solver=julia needs the DPFEHMBridge Julia package, which did not load: {error}\n"
                "Reinstall with pip install -e '.[julia]' and run python -c 'import juliacall' once online so "
                "that juliapkg installs DPFEHM and its dependencies."
            ) from error

    def __repr__(self) -> str:
        return f"DPFEHMEngine(reltol={self.reltol}, maxiter={self.maxiter})"

    def prepare(self, problem: DarcyProblem) -> tuple[DarcyProblem, Any, tuple[np.ndarray, ...]]:
        """(problem, DPFEHMBridge.Problem, edge ends): DPFEHM's grid, Dirichlet set and active nodes, in its node
        order, and the layout's edges as DPFEHM's 1-based node numbers (int64 (num_edges,) each), through which a
        conductivity per axis or a full tensor reaches DPFEHM."""
        grid = problem.grid
        if any(n < 2 for n in grid.ns):
            raise ValueError(
                f"DPFEHM's regular grids need at least 2 nodes along every axis, got ns={grid.ns}"
            )

        def nodes(image: np.ndarray, dtype: type) -> np.ndarray:
            return np.ascontiguousarray(grid.to_nodes(np.asarray(image, dtype=dtype)))

        with self._julia.lock:
            julia_problem = self._bridge.Problem(
                np.asarray(grid.mins, dtype=np.float64),
                np.asarray(grid.maxs, dtype=np.float64),
                np.asarray(grid.ns, dtype=np.int64),
                float(grid.thickness),
                nodes(problem.dirichlet, bool),
                nodes(problem.dirichlet_values, np.float64),
                nodes(problem.sources, np.float64),
                nodes(problem.active, bool),
                reltol=self.reltol,
                maxiter=self.maxiter,
            )
        node_of_pixel = np.empty(grid.num_nodes, dtype=np.int64)
        node_of_pixel[grid.to_nodes(np.arange(grid.num_nodes).reshape(grid.shape))] = np.arange(
            grid.num_nodes
        )
        ends = tuple(np.ascontiguousarray(node_of_pixel[end] + 1) for end in problem.layout.edges.T)
        return problem, julia_problem, ends

    def solve(
        self,
        state: tuple[DarcyProblem, Any, tuple[np.ndarray, ...]],
        log_k: torch.Tensor,
        heads: torch.Tensor,
        sources: torch.Tensor,
        role: str,
    ) -> torch.Tensor:
        problem, julia_problem, ends = state
        grid = problem.grid
        batch = log_k.shape[0]

        def dpfehm_order(x: torch.Tensor) -> np.ndarray:
            # Flat image order -> DPFEHM's node order (the Fortran order of the image), on the host.
            image = x.detach().cpu().numpy().reshape(batch, *grid.shape)
            return np.ascontiguousarray(grid.to_nodes(image))

        head_nodes, source_nodes = (dpfehm_order(x) for x in (heads, sources))
        layout = problem.layout
        if layout.form == "scalar":  # node log-conductivities: DPFEHM takes the geometric means itself
            name, leading = "solve", [(k,) for k in dpfehm_order(log_k)]
        else:  # every edge's transmissibility, and the edge's two nodes
            name = "solve_edges"
            leading = [(t, *ends) for t in layout.transmissibilities(log_k.detach().cpu().numpy())]
        function = getattr(self._bridge, name)
        self._julia.check_process()
        solved = np.empty_like(head_nodes)
        with self._julia.lock:
            for item in range(batch):
                try:
                    h = function(*leading[item], head_nodes[item], source_nodes[item], julia_problem)
                except self._julia.juliacall.JuliaError as error:
                    raise ForeignError(f"DPFEHMBridge.{name}: {error}") from error
                # A copy: Julia owns (and may later free) the memory behind h.
                solved[item] = np.array(h, dtype=np.float64, copy=True)
        pressure = grid.to_image(solved).reshape(batch, -1)
        pressure = np.where(problem.layout.active_mask, pressure, np.nan)
        return torch.from_numpy(pressure).to(log_k.device)
