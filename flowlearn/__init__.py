"""flowlearn: learn rough-fracture permeability corrections by training through a differentiable Darcy solve."""

# isort: off
# First, before anything imports torch: OpenMP's wait policy and malloc's settings.
from flowlearn.runtime import collection_paused
# isort: on

from flowlearn._moved import install as _install_moved_names

_install_moved_names()  # the old names of modules that moved (flowlearn._moved), for one release

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
    from flowlearn.version import __version__ as __version__


__all__ = [
    "ConvergenceError",
    "DarcyProblem",
    "DisconnectedRegionError",
    "Grid",
    "ProblemError",
    "SolveInputError",
    "solve_pressure",
]
