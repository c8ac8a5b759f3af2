"""flowlearn: learn rough-fracture permeability corrections by training through a differentiable Darcy solve."""

import os

# torch's OpenMP threads spin after every parallel region by default, taking the cores that CHOLMOD's and
# OpenBLAS's threads need a moment later (a training step at 256x260 ran 2-3x slower on a 2-core machine when this
# was set; the README's Threads paragraph has today's figures). Sleeping idle threads avoid that. OpenMP reads this
# when torch is first imported, so it only applies when flowlearn is imported before torch; an explicit setting is
# kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
