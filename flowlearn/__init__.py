"""flowlearn: learn rough-fracture permeability corrections by training through a differentiable Darcy solve."""

# isort: off
# First, before anything imports torch: OpenMP's wait policy and malloc's settings.
from flowlearn.runtime import collection_paused
# isort: on

with collection_paused():  # torch's and scipy's imports: one pass of the garbage collector, not several
    from flowlearn.darcy.grid import Grid
    from flowlearn.darcy.problem import DarcyProblem
    from flowlearn.darcy.solve import solve_pressure
    from flowlearn.errors import (
        ConvergenceError,
        DisconnectedRegionError,
        ProblemError,
        SolveInputError,
    )

__version__ = "0.1.0"

__all__ = [
    "ConvergenceError",
    "DarcyProblem",
    "DisconnectedRegionError",
    "Grid",
    "ProblemError",
    "SolveInputError",
    "solve_pressure",
]
