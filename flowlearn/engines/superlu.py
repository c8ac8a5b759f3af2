"""scipy's SuperLU: the CPU engine when CHOLMOD is not installed (an LU factorisation, so about twice the work)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from flowlearn.engines.factor import FactorEngine
from flowlearn.engines.inverse import Factor
from flowlearn.engines.multigrid import one_off_hierarchy


class _SuperLUFactor(Factor):
    exact = True

    def __init__(self, lu: spla.SuperLU) -> None:
        self._lu = lu

    def apply(self, rhs: np.ndarray) -> np.ndarray:
        return self._lu.solve(rhs)


class SuperLUEngine(FactorEngine):
    """Direct solves by scipy's SuperLU, with a symmetric ordering; options as :class:`FactorEngine`."""

    name = "superlu"
    exact = True
    one_off = staticmethod(one_off_hierarchy)

    def factorize(self, matrix: sp.csc_matrix, symbolic: Any, expect_reuse: bool = True) -> Factor:
        # A symmetric ordering and no pivoting suit an SPD matrix; the defaults (COLAMD, partial pivoting) do not.
        lu = spla.splu(
            matrix, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True}
        )
        return _SuperLUFactor(lu)
