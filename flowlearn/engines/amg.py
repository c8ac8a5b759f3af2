"""Conjugate gradients preconditioned by smoothed-aggregation algebraic multigrid (pyamg).

Memory grows linearly with the grid, so it is the engine for grids whose Cholesky factor does not fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from flowlearn.engines.factor import FactorEngine
from flowlearn.engines.inverse import Factor
from flowlearn.engines.multigrid import one_off_hierarchy


class _AMGFactor(Factor):
    exact = False
    ages = False

    def __init__(self, hierarchy: Any) -> None:
        self._cycle = hierarchy.aspreconditioner(cycle="V")

    def apply(self, rhs: np.ndarray) -> np.ndarray:
        return self._cycle.matvec(rhs)


class AMGEngine(FactorEngine):
    """AMG-preconditioned CG to ``rtol``; a hierarchy is reused as the preconditioner of nearby matrices.

    Options as :class:`FactorEngine`.
    """

    name = "amg"
    exact = False
    one_off = staticmethod(one_off_hierarchy)

    def factorize(self, matrix: sp.csc_matrix, symbolic: Any, expect_reuse: bool = True) -> Factor:
        import pyamg

        # 'local' weighting of the prolongation smoother avoids pyamg's randomised spectral-radius estimate, so
        # the same matrix always gives the same hierarchy and the same answer.
        hierarchy = pyamg.smoothed_aggregation_solver(
            matrix.tocsr(), symmetry="symmetric", smooth=("jacobi", {"weighting": "local"})
        )
        return _AMGFactor(hierarchy)
