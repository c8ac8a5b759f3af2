"""Foreign differentiable functions as torch ops.

* :mod:`~flowlearn.bridge.core`: the shared core, turning a forward/pullback/pushforward into a torch op;
* :mod:`~flowlearn.bridge.clib`: shared libraries with a C ABI (C, C++, Fortran via ``bind(c)``), through ctypes;
* :mod:`~flowlearn.bridge.julia`: ``julia2pytorch``, Julia functions differentiated by a Julia AD backend.

DPFEHM.jl as a pressure-solve engine lives with the other engines (:mod:`flowlearn.engines.dpfehm`).
``import flowlearn`` does not import this package, and importing it never starts Julia: juliacall is imported on
the first Julia call.
"""

from flowlearn.bridge.clib import CLibrary
from flowlearn.bridge.core import ForeignFunction, foreign_op
from flowlearn.bridge.julia import julia2pytorch
from flowlearn.errors import ForeignDerivativeError, ForeignError, JuliaUnavailableError

__all__ = [
    "CLibrary",
    "ForeignDerivativeError",
    "ForeignError",
    "ForeignFunction",
    "JuliaUnavailableError",
    "foreign_op",
    "julia2pytorch",
]
