"""The steady Darcy problem and its differentiable pressure solve, in DPFEHM's conventions.

* :mod:`~flowlearn.darcy.grid`: regular 2D/3D grids, DPFEHM's node order, image <-> node mapping;
* :mod:`~flowlearn.darcy.problem`: Dirichlet nodes and values, sources, active nodes;
* :mod:`~flowlearn.darcy.assembly`: the free-node system's pattern and values, in numpy and in torch;
* :mod:`~flowlearn.darcy.solve`: ``solve_pressure`` and the torch op ``PressureSolve``, whose linear solves run
  through an engine (:mod:`flowlearn.engines`).

This package file imports nothing, so that the engines can refer to the problem without an import cycle; import
from the modules, or from :mod:`flowlearn` (``from flowlearn import DarcyProblem, solve_pressure``).
"""
