"""The Darcy problem, its assembly, and the differentiable pressure solve."""

from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import PressureSolve, get_solver, solve_pressure

__all__ = ["DarcyProblem", "PressureSolve", "get_solver", "solve_pressure"]
