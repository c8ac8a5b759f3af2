"""The :class:`Factor` protocol: an (approximate) inverse of one matrix, made by a CPU factorisation backend.

A direct factorisation (CHOLMOD, SuperLU) solves with its own matrix exactly and preconditions CG on nearby ones; a
multigrid hierarchy (pyamg's, :mod:`~flowlearn.engines.multigrid`) only preconditions.
:class:`~flowlearn.engines.factor.FactorEngine` decides which factor serves which solve.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from flowlearn.engines.pcg import PCGResult, pcg, symmetric_product, whole


class Factor(ABC):
    """An (approximate) inverse of one matrix. ``exact`` is True when ``apply`` solves with it to round-off (else
    CG solves its own matrix too); ``reusable`` is False for a factor made quickly for its own matrix alone, which a
    nearby matrix replaces by one worth reusing rather than iterate with. ``ages`` is True for a factorisation,
    which preconditions the worse the further the matrices drift from its own, so that the replacement rule renews
    it; False for a multigrid hierarchy, which preconditions a drifted matrix about as well as its own.
    ``give_way_after``, for an inexact one, is the number of CG iterations after which a factorisation takes over
    (None: the engine's ``max_iter``, after which CG fails)."""

    exact: bool
    reusable: bool = True
    ages: bool = True
    give_way_after: int | None = None

    @abstractmethod
    def apply(self, rhs: np.ndarray) -> np.ndarray:
        """Return ``A^{-1} rhs`` (or its approximation) for rhs float64 (n,)."""

    def split(self, rhs: np.ndarray) -> tuple[float, Callable[[], np.ndarray]]:
        """``apply`` as CG takes it (:data:`~flowlearn.engines.pcg.Split`): ``rhs . apply(rhs)`` first, then a
        function returning ``apply(rhs)``. A factor whose first half of the work gives the former overrides it."""
        return whole(self.apply)(rhs)

    def preconditions_others(self) -> None:  # noqa: B027 - optional hook, most factors have nothing to shed
        """Called whenever the factor is about to precondition a matrix other than its own: a factor may then give
        up precision that only a direct solve of its own matrix needs, for speed."""

    def cg(
        self,
        matrix: sp.csc_matrix,
        rhs: np.ndarray,
        x0: np.ndarray | None,
        rtol: float,
        max_iter: int,
        x0_image: np.ndarray | None = None,
    ) -> PCGResult:
        """:func:`~flowlearn.engines.pcg.pcg` on ``matrix @ x = rhs`` preconditioned by this factor, with torch's
        threaded products."""
        return pcg(symmetric_product(matrix), rhs, self.split, x0, rtol, max_iter, x0_image)
