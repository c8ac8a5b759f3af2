"""flowlearn: learn rough-fracture permeability corrections by training through a differentiable Darcy solve."""

from flowlearn.darcy import DarcyProblem, solve_pressure
from flowlearn.errors import (
    ConvergenceError,
    DisconnectedRegionError,
    ProblemError,
    SolveInputError,
)
from flowlearn.grid import Grid
from flowlearn.linalg import SparseSolver

__version__ = "0.1.0"

__all__ = [
    "ConvergenceError",
    "DarcyProblem",
    "DisconnectedRegionError",
    "Grid",
    "ProblemError",
    "SolveInputError",
    "SparseSolver",
    "solve_pressure",
]
