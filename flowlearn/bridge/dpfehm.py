"""DPFEHM.jl as a pressure-solve backend (``solver=julia``), through ``julia2pytorch`` and the DPFEHMBridge package.

The Julia side (``julia/DPFEHMBridge``) builds DPFEHM's grid and boundary conditions for a problem and solves with
``DPFEHM.groundwater_steadystate``; its gradient is DPFEHM's own adjoint (a ChainRules rule used by Zygote).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from flowlearn.bridge.julia import JuliaUnavailableError, julia2pytorch, runtime

if TYPE_CHECKING:
    from flowlearn.darcy import DarcyProblem

# Where a source checkout keeps the Julia package that bridge/juliapkg.json declares as a dev path dependency.
BRIDGE_PACKAGE = Path(__file__).resolve().parents[2] / "julia" / "DPFEHMBridge"


class DPFEHMSolver:
    """Steady Darcy pressure solved by DPFEHM.jl, differentiable in the node log-conductivity.

    The constructor starts Julia and loads DPFEHMBridge, so a missing Julia fails here, at start-up, never in the
    middle of training.

    Args:
        reltol: Relative residual to which DPFEHM's algebraic multigrid solves (forward and adjoint).
        maxiter: Multigrid iteration limit; a forward solve that stops there without meeting ``reltol`` raises
            (DPFEHM itself would return silently).

    Raises:
        JuliaUnavailableError: Julia, juliacall or the DPFEHMBridge package is not available; the message says
            how to install them.
    """

    def __init__(self, reltol: float = 1e-12, maxiter: int = 1000) -> None:
        if not (BRIDGE_PACKAGE / "Project.toml").is_file():
            raise JuliaUnavailableError(
                f"solver=julia needs Julia and the DPFEHMBridge package, which a flowlearn source checkout keeps "
                f"in julia/DPFEHMBridge; it is not at {BRIDGE_PACKAGE}. Clone flowlearn and install it with "
                "pip install -e '.[julia]'."
            )
        julia = runtime("solver=julia")
        self.reltol, self.maxiter = float(reltol), int(maxiter)
        try:
            with julia.lock:
                self._bridge = julia.juliacall.Main.seval("import DPFEHMBridge; DPFEHMBridge")
        except julia.juliacall.JuliaError as error:
            raise JuliaUnavailableError(
                f"solver=julia needs the DPFEHMBridge Julia package, which did not load: {error}\n"
                "Reinstall with pip install -e '.[julia]' and run python -c 'import juliacall' once online so "
                "that juliapkg installs DPFEHM and its dependencies."
            ) from error
        self._lock = julia.lock
        self._solve = julia2pytorch("DPFEHMBridge.pressure", "import DPFEHMBridge")
        self._problems: weakref.WeakKeyDictionary[DarcyProblem, Any] = weakref.WeakKeyDictionary()

    def pressure(self, log_k: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
        """Pressure (head, metres) at every node, differentiable in ``log_k``.

        Args:
            log_k: Natural log of the node conductivity (K in m/s), image layout (rows = y, columns = x), any
                floating dtype and device: ``(B, H, W)`` or ``(B, D, H, W)``, or unbatched ``problem.grid.shape``.
                Values at inactive nodes are not used.
            problem: Grid, Dirichlet mask and values, sources and active mask.

        Returns:
            float64 tensor shaped like ``log_k`` on its device: the solved head at free nodes, the Dirichlet value
            at Dirichlet nodes, NaN at inactive nodes.
        """
        shape = tuple(problem.grid.shape)
        unbatched = tuple(log_k.shape) == shape
        batch = log_k.unsqueeze(0) if unbatched else log_k
        if tuple(batch.shape[1:]) != shape:
            raise ValueError(
                f"log_k has shape {tuple(log_k.shape)}; the problem's grid needs {shape} or (B, *{shape})"
            )
        julia_problem = self._julia_problem(problem)
        # DPFEHM's node order is the grid's (the Fortran order of the image).
        nodes = problem.grid.to_nodes(batch.to(torch.float64))
        image = problem.grid.to_image(torch.stack([self._solve(sample, julia_problem) for sample in nodes]))
        active = torch.as_tensor(np.asarray(problem.active, dtype=bool), device=image.device)
        image = torch.where(active, image, torch.nan)
        return image.squeeze(0) if unbatched else image

    def _julia_problem(self, problem: DarcyProblem) -> Any:
        """DPFEHMBridge's Problem for ``problem``, built once per problem object."""
        if problem not in self._problems:
            grid = problem.grid
            if any(n < 2 for n in grid.ns):
                raise ValueError(
                    f"DPFEHM's regular grids need at least 2 nodes along every axis, got ns={grid.ns}"
                )

            def nodes(image: Any, dtype: type) -> np.ndarray:
                return np.ascontiguousarray(grid.to_nodes(np.asarray(image, dtype=dtype)))

            with self._lock:
                self._problems[problem] = self._bridge.Problem(
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
        return self._problems[problem]
