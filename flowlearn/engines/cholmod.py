"""SuiteSparse CHOLMOD (scikit-sparse 0.4.16): sparse Cholesky, the default CPU engine when installed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from flowlearn.engines import cholmod_available
from flowlearn.engines.base import check_count, check_flag
from flowlearn.engines.factor import FactorEngine
from flowlearn.engines.inverse import Factor
from flowlearn.engines.multigrid import one_off_hierarchy
from flowlearn.engines.trisolve import TreePlan, TreeSolver, in_postorder, ldl_from_cholesky, plan_tree
from flowlearn.errors import SolutionError, UnavailableError
from flowlearn.threads import usable_cores

if TYPE_CHECKING:
    from flowlearn.darcy.assembly import SystemLayout

# Fewest unknowns for which the thorough analysis orders a simplicial factor by nested dissection; below, by
# approximate minimum degree, like the quick one. Nested dissection's fill is no lower on small grids and its
# analysis costs 10-15x more (2026-11-27, simplicial LDL^T of a rough fracture's matrix; analysis, factorisation):
# 7.2 and 1.3 ms against 0.7 and 1.1 ms at 64x64, 39 and 10.0 ms against 2.6 and 10.3 ms at 128x128 (repaid after
# about a hundred factorisations of the pattern), 66 and 17 ms against 4 and 20 ms at 160x160 (after about twenty).
NESTED_DISSECTION_UNKNOWNS = 20_000
# A matrix not expected to be reused (2026-11-28, a one-off solve through the engine, analysis included, in ms:
# multigrid CG / the quick simplicial factor / the quick supernodal factor): 5.3 / 1.9 / 5.9 at 48x48,
# 4.3 / 2.2 / 5.3 at 64x64, 5.2 / 3.8 / 10.6 at 80x80, 6.4 / 6.3 / 13.0 at 96x96, 8.4 / 9.7 / 16.7 at 112x112,
# 10.6 / 14.4 / 23.5 at 128x128. On a 2D grid, multigrid from MULTIGRID_UNKNOWNS unknowns; below, and on other
# grids, a factor after the quick analysis (minimum degree), simplicial on 2D grids below QUICK_SIMPLICIAL_UNKNOWNS:
# supernodal 66 + 17 ms against 46 + 8 ms (numeric + analysis) at 192x192, but 97 + 20 against 127 + 26 at
# 256x260; and supernodal on 3D grids, whose fill makes it 1.3x faster at 16^3, 2.4x at 20^3, 3.8x at 24^3.
MULTIGRID_UNKNOWNS = 9_000
QUICK_SIMPLICIAL_UNKNOWNS = 50_000


class _CholmodFactor(Factor):
    def __init__(self, factor: Any, tree: TreeSolver | None, reusable: bool = True) -> None:
        self.reusable = reusable
        # With a tree solver the CHOLMOD factor is no longer needed: its entries live on in the solver.
        self._factor = None if tree else factor
        self._tree = tree

    @property
    def exact(self) -> bool:
        return not (self._tree and self._tree.rounded)

    def apply(self, rhs: np.ndarray) -> np.ndarray:
        return self._tree.apply(rhs) if self._tree else self._factor(rhs)

    def split(self, rhs: np.ndarray) -> tuple[float, Callable[[], np.ndarray]]:
        return self._tree.split(rhs) if self._tree else super().split(rhs)

    def preconditions_others(self) -> None:
        if self._tree:
            self._tree.round()


@dataclass
class _CholmodAnalysis:
    planar: bool  # whether the pattern is a 2D grid's (its quick factor may then be simplicial)
    # scikit-sparse Factors holding the analyses: quick (approximate minimum degree) and thorough (nested
    # dissection), each made on first use.
    quick: Any = None
    thorough: Any = None
    tree: bool = False  # whether the thorough factors are solved by the tree solver
    tree_plan: TreePlan | None = None  # made from the first tree-solved factor


class CholmodEngine(FactorEngine):
    """Sparse Cholesky from SuiteSparse CHOLMOD (scikit-sparse 0.4.16); the ordering and factor type follow the
    grid size and how often the pattern has been factored.

    A matrix not expected to be reused -- a one-off solve, the first of a training loop, one far from the last --
    goes to multigrid-preconditioned CG on 2D grids of ``multigrid_unknowns`` or more (:class:`FactorEngine`).
    Otherwise it is factored after CHOLMOD's quick analysis, approximate minimum degree, into a simplicial factor on
    2D grids below :data:`QUICK_SIMPLICIAL_UNKNOWNS` unknowns and a supernodal one otherwise: the nested-dissection
    analysis below costs more than a whole factorisation on small grids (0.4 s against 0.12 s at 256x260). That
    factor serves its own matrix (the forward solve and its adjoint). A matrix close to the last one shows a
    training loop, and is factored after the thorough analysis, computed once per pattern, whose factors
    then precondition the matrices after it: nested dissection from :data:`NESTED_DISSECTION_UNKNOWNS` unknowns (and
    for every factor solved on all cores), where its lower fill repays its analysis. CHOLMOD's own nested
    dissection (``nesdis``: METIS bisections, constrained minimum degree on the leaves) gives these factors 6-7%
    fewer entries than plain METIS on fracture grids, so solves 10% faster at 1024x1024. Solves are what a training
    loop spends its time on once factors are reused, and a simplicial LDL^T solves about twice as fast as CHOLMOD's
    supernodal solve:

    * below ``tree_solve_unknowns`` unknowns (or on one core) a simplicial LDL^T, solved by CHOLMOD: on small grids
      waking the other cores costs more than they save;
    * from ``tree_solve_unknowns`` up to ``simplicial_limit`` a supernodal factorisation, whose dense BLAS kernels
      run on all cores (3 s against 28 s for the simplicial one at 1024x1024, 0.6 against 3.3 s at 512x512,
      0.14 against 0.31 s at 256x256),
      turned into the same simplicial LDL^T and solved on all cores by
      :class:`~flowlearn.engines.trisolve.TreeSolver` (1.25-1.55x faster than CHOLMOD's one-core solve on 2 cores
      from 256x260 up), which rounds L to float32 once the factor preconditions other matrices;
    * above ``simplicial_limit`` a supernodal LL^T after plain METIS, solved by CHOLMOD: on the very large grids
      where a single factorisation dominates, ``nesdis`` gains nothing and its analysis takes 25% longer.

    Args:
        simplicial_limit: Most unknowns whose factors are solved as a simplicial LDL^T, an integer >= 0.
        tree_solve_unknowns: Fewest unknowns whose factors are solved on all cores, an integer >= 0 (None: never).
        quick_one_offs: Factor a matrix not expected to be reused after the quick analysis (False: always the
            thorough one).
        multigrid_unknowns: As :class:`FactorEngine`'s, by default :data:`MULTIGRID_UNKNOWNS`, from where
            multigrid beats the quick factor.
        **options: Reuse and tolerance options of :class:`~flowlearn.engines.factor.FactorEngine`.

    Raises:
        UnavailableError: scikit-sparse is not installed.
    """

    name = "cholmod"
    exact = True
    one_off = staticmethod(one_off_hierarchy)

    def __init__(
        self,
        simplicial_limit: int = 1_500_000,
        tree_solve_unknowns: int | None = 30_000,
        quick_one_offs: bool = True,
        multigrid_unknowns: int | None = MULTIGRID_UNKNOWNS,
        **options: Any,
    ) -> None:
        super().__init__(multigrid_unknowns=multigrid_unknowns, **options)
        check_count(simplicial_limit, "simplicial_limit")
        check_count(tree_solve_unknowns, "tree_solve_unknowns", none=True)
        check_flag(quick_one_offs, "quick_one_offs")
        if not cholmod_available():
            raise UnavailableError(
                "solver 'cholmod' needs scikit-sparse: apt-get install libsuitesparse-dev libopenblas-dev, then "
                "pip install 'flowlearn[cholmod]' (or choose solver 'superlu')"
            )
        from sksparse import cholmod

        self._cholmod = cholmod
        self.simplicial_limit = simplicial_limit
        self.tree_solve_unknowns = tree_solve_unknowns
        self.quick_one_offs = quick_one_offs

    def analyze(self, matrix: sp.csc_matrix, layout: SystemLayout) -> _CholmodAnalysis:
        # Nothing yet: which analysis a pattern needs shows at its factorisations.
        return _CholmodAnalysis(planar=len(layout.shape) == 2)

    def factorize(
        self, matrix: sp.csc_matrix, symbolic: _CholmodAnalysis, expect_reuse: bool = True
    ) -> Factor:
        analysis = symbolic
        if self.quick_one_offs and not expect_reuse:
            if analysis.quick is None:
                simplicial = analysis.planar and matrix.shape[0] < QUICK_SIMPLICIAL_UNKNOWNS
                mode = "simplicial" if simplicial else "supernodal"
                analysis.quick = self._cholmod.analyze(matrix, mode=mode, ordering_method="amd")
            factor = self._numeric(analysis.quick, matrix)
            return _CholmodFactor(factor, None, reusable=False)
        if analysis.thorough is None:
            analysis.thorough, analysis.tree = self._thorough_analysis(matrix)
        factor = self._numeric(analysis.thorough, matrix)
        return _CholmodFactor(factor, self._tree_solver(factor, analysis) if analysis.tree else None)

    def _thorough_analysis(self, matrix: sp.csc_matrix) -> tuple[Any, bool]:
        """The nested-dissection analysis of the pattern, and whether its factors are tree-solved."""
        unknowns = matrix.shape[0]
        tree = (
            self.tree_solve_unknowns is not None
            and self.tree_solve_unknowns <= unknowns <= self.simplicial_limit
            and usable_cores() > 1
        )
        if unknowns > self.simplicial_limit:
            mode, ordering = "supernodal", "metis"
        elif tree or unknowns >= NESTED_DISSECTION_UNKNOWNS:
            mode, ordering = ("supernodal" if tree else "simplicial"), "nesdis"
        else:
            mode, ordering = "simplicial", "amd"
        try:
            return self._cholmod.analyze(matrix, mode=mode, ordering_method=ordering), tree
        except self._cholmod.CholmodError:  # a CHOLMOD built without METIS
            return self._cholmod.analyze(matrix, mode=mode), tree

    def _numeric(self, symbolic: Any, matrix: sp.csc_matrix) -> Any:
        """A numeric factor of ``matrix`` after the analysis ``symbolic`` (a new scikit-sparse Factor)."""
        try:
            return symbolic.cholesky(matrix)
        except self._cholmod.CholmodNotPositiveDefiniteError as error:
            # The assembled matrix is SPD in exact arithmetic; CHOLMOD loses that only when the conductances span
            # more than float64 resolves.
            diagonal = matrix.diagonal()
            raise SolutionError(
                f"CHOLMOD found the system not positive definite ({error}): its diagonal spans "
                f"{diagonal.min():.3g} to {diagonal.max():.3g}, more than float64 resolves"
            ) from error

    def _tree_solver(self, factor: Any, analysis: _CholmodAnalysis) -> TreeSolver:
        factor_l, pivots, permutation = in_postorder(*ldl_from_cholesky(factor.L()), factor.P())
        if analysis.tree_plan is None or not np.array_equal(analysis.tree_plan.indptr, factor_l.indptr):
            analysis.tree_plan = plan_tree(factor_l, usable_cores())
        return TreeSolver(factor_l, pivots, permutation, analysis.tree_plan)
