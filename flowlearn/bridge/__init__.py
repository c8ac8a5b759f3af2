"""Foreign differentiable functions as torch ops.

* :mod:`~flowlearn.bridge.core`: the shared core, turning a forward/pullback/pushforward into a torch op;
* :mod:`~flowlearn.bridge.clib`: shared libraries with a C ABI (C, C++, Fortran via ``bind(c)``), through ctypes;
* :mod:`~flowlearn.bridge.julia`: ``julia2pytorch``, Julia functions differentiated by a Julia AD backend;
* :mod:`~flowlearn.bridge.dpfehm`: DPFEHM.jl as a pressure solver backend.

Importing this package never starts Julia: juliacall is imported on the first Julia call.
"""

from flowlearn.bridge.clib import CLibrary
from flowlearn.bridge.core import ForeignDerivativeError, ForeignError, ForeignFunction, foreign_op
from flowlearn.bridge.dpfehm import DPFEHMSolver
from flowlearn.bridge.julia import JuliaUnavailableError, julia2pytorch

__all__ = [
    "CLibrary",
    "DPFEHMSolver",
    "ForeignDerivativeError",
    "ForeignError",
    "ForeignFunction",
    "JuliaUnavailableError",
    "foreign_op",
    "julia2pytorch",
]
