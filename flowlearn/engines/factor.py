"""CPU engines that factorise: the reuse of factors across long sequences of solves, shared by every backend.

A factorisation backend (CHOLMOD, SuperLU, AMG) only says how to analyse a sparsity pattern and how to factor one
matrix into a :class:`~flowlearn.engines.inverse.Factor` whose ``apply`` approximates ``A^{-1}``: exactly for the
direct backends, as one multigrid V-cycle for AMG. :class:`FactorEngine` does the rest, the same for all of them.

A training loop asks for a forward and an adjoint solve per step, with conductivities that move slightly between
steps. The engine keeps, per problem and per batch slot, the last factor and the last few solutions of each role, and
chooses per solve:

* the matrix is the one the slot's factor was built from -> a direct solve (the adjoint after a forward), or CG
  preconditioned by it where the factor is inexact (multigrid, or a factor rounded since);
* the matrix is close to it -> CG preconditioned by the old factor, started from the best combination of the last
  solutions of that role, to the same tight tolerance. A factor of a nearby matrix is an excellent
  preconditioner, and it costs a few triangular solves instead of a new factorisation;
* otherwise, on a 2D grid of at least ``multigrid_unknowns`` free nodes, a matrix that nothing suggests will be
  reused (a one-off solve, the first of a run) -> CG preconditioned by a smoothed-aggregation multigrid
  hierarchy (:mod:`~flowlearn.engines.multigrid`), 1.6-3.4x faster than CHOLMOD's analysis, factorisation and
  solve at 256x260 to 1024x1024; the adjoint of the same matrix reuses the hierarchy. Should CG stall, a
  factorisation takes over, and so it does when the matrix comes back with a third new right-hand side (a
  Gauss–Newton step solves one matrix twice per inner iteration): direct solves then cost a fraction of
  multigrid's 20-odd iterations;
* otherwise -> a new numeric factorisation (the symbolic analysis is kept per problem).

A solve in the role ``"one-off"`` (a baseline's, a trial of a parameter search) goes the way of a first matrix on a
slot of its own, dropped after it: the slot's factor that a training loop reuses stays as it was, and a search whose
trial matrices draw close to each other does not take them for a training loop and pay for the nested-dissection
analysis of a reusable factor.

An old factor grows a worse preconditioner as the conductivities drift away from it, so CG needs more iterations
step by step. The slot refactors once a CG solve costs more than the average solve of the current factor's life,
its factorisation included: the classic replacement rule for a machine whose running cost grows, which minimises
the long-run cost per solve. A CG solve that would cost more than a factorisation is abandoned for one as well.
Where the measured costs say that reuse does not pay at all, it is still tried now and then, ever more rarely, so that
a slow measurement (kernels compiling on a cold cache) cannot keep a grid where it pays from reusing.

Results are exact to ``rtol`` whichever way is taken, and an iterative solve that misses its tolerance raises
:class:`~flowlearn.errors.ConvergenceError`; it never returns silently.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from numba import njit, prange

from flowlearn.checks import check_setting, is_number
from flowlearn.engines.base import ONE_OFF, Engine, check_count, check_flag, check_tolerance
from flowlearn.engines.inverse import Factor
from flowlearn.engines.pcg import symmetric_product
from flowlearn.errors import ConvergenceError
from flowlearn.threads import kernel_threads, single_threaded_blas

# Earlier solutions per role and batch slot whose span CG starts in (see _start).
START_BASIS = 3
# Solves of one matrix that a one-off preconditioner (multigrid) iterates for before a factorisation replaces it:
# the forward and the adjoint of a one-off solve. (A repeated right-hand side starts at its old solution and needs
# no iteration: a validation pass of unchanged weights stays a multigrid solve every epoch.)
ONE_OFF_SOLVES = 2
# Fewest CG iterations a new factorisation must be worth for an old factor to be tried as a preconditioner.
REUSE_WORTH = 3

if TYPE_CHECKING:
    from flowlearn.darcy.assembly import SystemLayout
    from flowlearn.darcy.problem import DarcyProblem


@dataclass
class _Slot:
    factor: Factor | None = None
    factored_data: np.ndarray | None = None  # matrix entries the factor was built from
    # The last START_BASIS solutions of each role, oldest first: the span the next CG solve of the role starts in.
    solutions: dict[str, list[np.ndarray]] = field(default_factory=dict)
    # (matrix entries, whether they are close to factored_data): the adjoint asks again about the forward's matrix.
    closeness: tuple[np.ndarray, bool] | None = None
    # The current factor's life so far, for the replacement rule: seconds of its factorisation and of every solve
    # since, their count, and a running mean of the recent CG solves.
    life_seconds: float = 0.0
    life_solves: int = 0
    cg_seconds: float = 0.0
    iterated_solves: int = 0  # of the factor's life, those where CG took at least one iteration


@dataclass
class FactorState:
    """What a :class:`FactorEngine` keeps per problem: the layout, its symbolic analysis, the batch slots."""

    layout: SystemLayout
    symbolic: Any = None
    analysed: bool = False
    slots: dict[int, _Slot] = field(default_factory=dict)
    factor_seconds: float = 0.0  # running estimate of one numeric factorisation
    apply_seconds: float = 0.0  # estimate of one PCG iteration with a reused factor (see _estimate)
    # Refactorisations that the estimates chose over reuse since reuse was last tried, and how many of them trigger
    # the next try (doubled while the tries confirm the estimates).
    declined: int = 0
    retry_after: int = 1


class FactorEngine(Engine):
    """A CPU engine built on a factorisation backend: numpy assembly per batch item, factors reused across calls.

    Subclasses implement :meth:`factorize` (and :meth:`analyze` when the method has a symbolic phase) and set
    ``exact``: whether a factor solves exactly (a direct method) or only preconditions CG (multigrid). They may set
    ``one_off``, the maker of a cheaper preconditioner for a matrix that nothing suggests will be reused,
    ``(layout, matrix) -> Factor`` or None where it does not apply (the engines here set the multigrid hierarchy
    of :func:`flowlearn.engines.multigrid.one_off_hierarchy`); without one every matrix is factorised.

    Args:
        rtol: Relative energy-norm error at which CG stops (direct solves are exact to round-off), in
            [:data:`~flowlearn.engines.base.FINEST_TOLERANCE`, 1).
        reuse: Reuse old factors as preconditioners and old solutions as warm starts. With False every matrix
            is factored afresh (the adjoint solve still reuses the forward factor).
        max_change: Largest relative change of any matrix entry for which an old factor is tried as a
            preconditioner.
        max_iter: Iteration limit of CG with a fresh inexact factor (AMG).
        reuse_budget: CG iterations allowed with an old direct factor before refactoring instead. None adapts it
            to the measured cost ratio of a factorisation and an iteration, so small grids simply refactor.
        multigrid_unknowns: Fewest free nodes of a 2D grid for which a matrix not expected to be reused is solved
            by multigrid-preconditioned CG instead of a factorisation (None: never); a backend may change the
            default to where its own factorisation stops being faster.
    """

    exact: ClassVar[bool]
    one_off: ClassVar[Callable[[SystemLayout, sp.csc_matrix], Factor | None] | None] = None

    def __init__(
        self,
        rtol: float = 1e-11,
        reuse: bool = True,
        max_change: float = 0.5,
        max_iter: int = 1000,
        reuse_budget: int | None = None,
        multigrid_unknowns: int | None = 3_000,
    ) -> None:
        super().__init__()
        check_tolerance(rtol, "rtol")
        check_flag(reuse, "reuse")
        check_setting(
            is_number(max_change) and 0 < max_change < 1, "max_change", "must lie in (0, 1)", max_change
        )
        check_count(max_iter, "max_iter", low=1)
        check_count(reuse_budget, "reuse_budget", none=True)
        check_count(multigrid_unknowns, "multigrid_unknowns", none=True)
        self.rtol, self.reuse, self.max_change = rtol, reuse, max_change
        self.max_iter, self.reuse_budget = max_iter, reuse_budget
        self.multigrid_unknowns = multigrid_unknowns

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rtol={self.rtol}, reuse={self.reuse})"

    def analyze(self, matrix: sp.csc_matrix, layout: SystemLayout) -> Any:
        """Symbolic analysis reused for every matrix with this pattern, the free-node system of ``layout`` (None
        when the method has none)."""
        return None

    @abstractmethod
    def factorize(self, matrix: sp.csc_matrix, symbolic: Any, expect_reuse: bool = True) -> Factor:
        """Factor ``matrix`` (SPD, CSC, float64), reusing ``symbolic`` from :meth:`analyze`. ``expect_reuse`` says
        whether the factor will likely precondition later matrices (this one is close to the slot's last), for a
        backend that factors differently for one matrix alone."""

    # -- the engine protocol ---------------------------------------------------------------------------------

    def prepare(self, problem: DarcyProblem) -> FactorState:
        return FactorState(problem.layout)

    def solve(
        self, state: FactorState, log_k: torch.Tensor, heads: torch.Tensor, sources: torch.Tensor, role: str
    ) -> torch.Tensor:
        layout = state.layout
        log_k_nodes, head_nodes, source_nodes = (x.numpy() for x in (log_k, heads, sources))
        pressure = np.where(layout.active_mask, head_nodes, np.nan)
        for slot in range(log_k_nodes.shape[0]):
            transmissibility, matrix = layout.system(slot, log_k_nodes[slot])
            rhs = layout.rhs(transmissibility, head_nodes[slot], source_nodes[slot])
            pressure[slot, layout.free_nodes] = self.solve_system(state, slot, role, matrix, rhs)
        return torch.from_numpy(pressure)

    # -- one system ------------------------------------------------------------------------------------------

    def solve_system(
        self, state: FactorState, slot: int, role: str, matrix: sp.csc_matrix, rhs: np.ndarray
    ) -> np.ndarray:
        """Solve ``matrix @ x = rhs`` for batch slot ``slot``: SPD float64 CSC (n, n) with the pattern of
        ``state.layout``, rhs float64 (n,); returns float64 (n,)."""
        if not state.analysed:
            state.symbolic, state.analysed = self.analyze(matrix, state.layout), True
        if role == ONE_OFF:  # solved as a first matrix is, on a slot of its own that is then dropped
            return self._solve_slot(state, _Slot(), role, matrix, rhs)
        entry = state.slots.setdefault(slot, _Slot())
        start = time.perf_counter()
        solution = self._solve_slot(state, entry, role, matrix, rhs)
        entry.life_seconds += time.perf_counter() - start
        entry.life_solves += 1
        if self.reuse:
            entry.solutions[role] = [*entry.solutions.get(role, [])[1 - START_BASIS :], solution]
        return solution

    def _solve_slot(
        self, state: FactorState, entry: _Slot, role: str, matrix: sp.csc_matrix, rhs: np.ndarray
    ) -> np.ndarray:
        if entry.factor is not None and _equal(entry.factored_data, matrix.data):
            # A one-off's hierarchy served its forward and adjoint; a matrix that keeps coming back with new
            # right-hand sides gets a factor.
            if (
                self.reuse
                and self.exact
                and not entry.factor.reusable
                and entry.iterated_solves >= ONE_OFF_SOLVES
            ):
                self._factorize(state, entry, matrix, expect_reuse=True, multigrid=False)
            result = self._with_factor(state, entry, role, matrix, rhs)
            if result is not None:
                return result
        elif (budget := self._budget(state, entry)) and self._close(state, entry, matrix.data):
            entry.factor.preconditions_others()
            result = self._pcg(state, entry, role, matrix, rhs, budget)
            if result is not None:
                return result
        expect_reuse = self.reuse and entry.factor is not None and self._close(state, entry, matrix.data)
        self._factorize(state, entry, matrix, expect_reuse)
        result = self._with_factor(state, entry, role, matrix, rhs)
        if result is None and entry.factor.give_way_after is not None:
            self._factorize(state, entry, matrix, expect_reuse, multigrid=False)
            result = self._with_factor(state, entry, role, matrix, rhs)
        if result is None:
            raise ConvergenceError(
                f"{self.name}-preconditioned CG did not reach rtol={self.rtol:g} within {self.max_iter} "
                f"iterations on a system of {matrix.shape[0]} unknowns; raise max_iter, loosen rtol, or use a "
                "direct backend (cholmod, superlu)"
            )
        return result

    def _with_factor(
        self, state: FactorState, entry: _Slot, role: str, matrix: sp.csc_matrix, rhs: np.ndarray
    ) -> np.ndarray | None:
        """Solve with the slot's factor of this very matrix: directly when it is exact, else by CG to rtol (None
        when CG misses it)."""
        if entry.factor.exact:
            return self._direct(entry, matrix, rhs)
        return self._pcg(state, entry, role, matrix, rhs, entry.factor.give_way_after or self.max_iter)

    def _budget(self, state: FactorState, entry: _Slot) -> int:
        """CG iterations worth spending with the slot's old factor (0: refactor right away)."""
        if not self.reuse or entry.factor is None or not entry.factor.reusable:
            return 0
        if not entry.factor.ages:
            return self.max_iter
        if self.reuse_budget is not None:
            return self.reuse_budget
        if state.apply_seconds == 0:
            return self.max_iter  # no measurement yet: try once
        if entry.cg_seconds * entry.life_solves >= entry.life_seconds:
            return 0  # CG now costs more than the factor's average solve: replace it
        # An old factor is worth iterating with only while CG costs less than a new factorisation.
        budget = int(state.factor_seconds / state.apply_seconds)
        if budget >= REUSE_WORTH:
            state.declined, state.retry_after = 0, 1
            return min(budget, 50)
        # Refactoring measures nothing about CG, so a verdict drawn from one slow measurement (numba compiling its
        # kernels on a cold cache, a load spike) would stand for the engine's life: 2.2-3.4x slower training steps
        # at 256x260. Reuse is tried again after 1, 2, 4, ... such refactorisations, rarer while the tries confirm
        # the verdict (where a factorisation is cheap: small grids), each try at most REUSE_WORTH iterations.
        state.declined += 1
        if state.declined < state.retry_after:
            return 0
        state.declined, state.retry_after = 0, 2 * state.retry_after
        return REUSE_WORTH

    def _close(self, state: FactorState, entry: _Slot, data: np.ndarray) -> bool:
        """Whether ``data`` is near enough to the slot's factored matrix for its factor to precondition CG."""
        if entry.closeness is None or entry.closeness[0] is not data:
            reference, change = entry.factored_data, self.max_change
            if data.size != reference.size:
                close = False
            else:
                layout = state.layout
                with kernel_threads(data.size):
                    close = _ratios_within(
                        data, reference, 1 - change, 1 + change, layout.indptr, layout.diagonal_positions
                    )
            entry.closeness = (data, close)
        return entry.closeness[1]

    def _direct(self, entry: _Slot, matrix: sp.csc_matrix, rhs: np.ndarray) -> np.ndarray:
        # One step of iterative refinement takes the error from ~eps*cond(A) down to ~eps (1e-12 -> 1e-14 on
        # the fracture grid) for the price of a matvec and one more triangular solve pair.
        self.stats.direct_solves += 1
        with single_threaded_blas():
            solution = entry.factor.apply(rhs)
            return solution + entry.factor.apply(rhs - symmetric_product(matrix)(solution))

    def _factorize(
        self,
        state: FactorState,
        entry: _Slot,
        matrix: sp.csc_matrix,
        expect_reuse: bool,
        multigrid: bool = True,
    ) -> None:
        start = time.perf_counter()
        factor = self._one_off(state.layout, matrix) if multigrid and not expect_reuse else None
        entry.factor = factor or self.factorize(matrix, state.symbolic, expect_reuse)
        if entry.factor.reusable:
            # The estimate that sizes the reuse budget: what replacing a reused factor costs.
            state.factor_seconds = _running(state.factor_seconds, time.perf_counter() - start)
        entry.factored_data = matrix.data.copy()
        entry.closeness = None
        entry.life_seconds, entry.life_solves, entry.cg_seconds, entry.iterated_solves = 0.0, 0, 0.0, 0
        self.stats.factorizations += 1

    def _one_off(self, layout: SystemLayout, matrix: sp.csc_matrix) -> Factor | None:
        """The backend's preconditioner for a one-off matrix where its grid is large enough to gain from one, else
        None."""
        if (
            self.one_off is None
            or self.multigrid_unknowns is None
            or matrix.shape[0] < self.multigrid_unknowns
        ):
            return None
        return self.one_off(layout, matrix)

    def _pcg(self, state, entry, role, matrix, rhs, max_iter) -> np.ndarray | None:
        start = time.perf_counter()
        with single_threaded_blas():
            start_guess, start_image = _start(matrix, rhs, entry.solutions.get(role, []))
            result = entry.factor.cg(matrix, rhs, start_guess, self.rtol, max_iter, start_image)
        seconds = time.perf_counter() - start
        entry.cg_seconds = _running(entry.cg_seconds, seconds)
        if result.iterations and entry.factor.reusable:
            state.apply_seconds = _estimate(state.apply_seconds, seconds / result.iterations)
        self.stats.pcg_solves += 1
        self.stats.pcg_iterations += result.iterations
        entry.iterated_solves += int(result.iterations > 0)
        return result.solution if result.converged else None


def _start(
    matrix: sp.csc_matrix, rhs: np.ndarray, solutions: list[np.ndarray]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """CG's starting guess and, where it comes for free, its image A x0 (else None).

    The guess is the combination x0 = Σ c_i x_i of the earlier ``solutions`` x_i closest to the solution in the
    energy norm, by the Galerkin condition Σ_j (x_i·A x_j) c_j = x_i·b; None without earlier solutions. It is
    never farther than the last solution alone, which is one such combination; and where the conductivities drift
    steadily (an optimiser's steps), the combination extrapolates along the drift: a quarter to a third fewer CG
    iterations on the real fracture's Adam fit. Costs one matrix-vector product per earlier solution, and the same
    combination of their images gives A x0, CG's first product."""
    if len(solutions) < 2:
        return (solutions[-1] if solutions else None), None
    product = symmetric_product(matrix)
    solutions, images = tuple(solutions), tuple(product(x) for x in solutions)
    with kernel_threads(rhs.size):
        gram, projections = _galerkin_system(solutions, images, rhs)
        # Successive solutions are nearly parallel: a least-squares solve with a cut-off keeps the system sane.
        coefficients = np.linalg.lstsq(gram, projections, rcond=1e-13)[0]
        start, image = np.empty_like(rhs), np.empty_like(rhs)
        _combine(coefficients, solutions, start)
        _combine(coefficients, images, image)
    return start, image


# Chunks of the vectors that _galerkin_system takes in turn: at 1024x1024 each chunk of its seven vectors fits in
# a core's cache, so its dot products read memory once.
_CHUNKS = 64


@njit(nogil=True, parallel=True, fastmath=True, cache=True)
def _galerkin_system(solutions, images, rhs):  # pragma: no cover - compiled
    """(G, g) of :func:`_start`, G_ij = x_i·A x_j (m, m) and g_i = x_i·b (m,), from a tuple of m solutions x_i, their
    images A x_i and b, float64 (n,) each. Chunk by chunk on the caller's numba threads, every dot product of a
    chunk while it is in cache: one pass through memory, where the nine dot products of three solutions each
    streamed two vectors."""
    m, n = len(solutions), rhs.size
    size = -(-n // _CHUNKS)
    partial = np.zeros((_CHUNKS, m, m + 1))
    for chunk in prange(_CHUNKS):
        low, high = chunk * size, min((chunk + 1) * size, n)
        for i in range(m):
            for j in range(i, m + 1):  # the upper triangle (G is symmetric, like A), then g in column m
                other = rhs if j == m else images[j]
                total = 0.0
                for k in range(low, high):
                    total += solutions[i][k] * other[k]
                partial[chunk, i, j] = total
    summed = partial.sum(axis=0)
    gram = np.empty((m, m))
    for i in range(m):
        for j in range(i, m):
            gram[i, j] = gram[j, i] = summed[i, j]
    return gram, summed[:, m].copy()


@njit(nogil=True, parallel=True, fastmath=True, cache=True)
def _combine(coefficients, vectors, out):  # pragma: no cover - compiled
    """out = sum_i coefficients[i] vectors[i] (a tuple of float64 (n,)), in one pass on the caller's numba
    threads."""
    for k in prange(out.size):
        total = 0.0
        for i in range(len(vectors)):
            total += coefficients[i] * vectors[i][k]
        out[k] = total


# Any entry may also change by this fraction of its column's old diagonal, times the allowed relative change, for
# the old factor still to precondition, however much that is relative to the entry itself: a full tensor's
# couplings pass through 0 (a cross term whose sign flips moves its weight from one diagonal to the other; an axis
# edge whose weight the cross terms use up), where a relative change means nothing to the preconditioner.
NEW_COUPLING = 0.01


@njit(nogil=True, parallel=True, cache=True, error_model="numpy")
def _ratios_within(data, reference, low, high, indptr, diagonal):  # pragma: no cover - compiled
    """Whether every entry of a CSC matrix (pointers ``indptr``, each column's diagonal entry at ``diagonal``) is
    within [low, high] times its old value, or has moved by at most NEW_COUPLING * (high - 1) of its column's old
    diagonal. One pass on the caller's numba threads, in chunks of columns that each stop at their first entry
    outside, where numpy's ratio, min and max took three passes on one core (20 ms at 1024x1024)."""
    columns = indptr.size - 1
    chunks = 64
    size = -(-columns // chunks)
    inside = np.ones(chunks, dtype=np.bool_)
    for chunk in prange(chunks):
        for column in range(chunk * size, min((chunk + 1) * size, columns)):
            allowed = NEW_COUPLING * (high - 1) * abs(reference[diagonal[column]])
            for k in range(indptr[column], indptr[column + 1]):
                if abs(data[k] - reference[k]) > allowed:
                    ratio = data[k] / reference[k]  # NaN or inf where the old entry was 0: outside
                    if not low <= ratio <= high:
                        inside[chunk] = False
                        break
            if not inside[chunk]:
                break
    return inside.all()


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.array_equal``, quick to say no: entries of successive matrices usually differ everywhere."""
    if a.shape != b.shape:
        return False
    stride = max(1, a.size // 256)
    return np.array_equal(a[::stride], b[::stride]) and np.array_equal(a, b)


def _running(previous: float, sample: float) -> float:
    """Exponential running mean, seeded by the first sample."""
    return sample if previous == 0 else 0.7 * previous + 0.3 * sample


def _estimate(previous: float, sample: float) -> float:
    """The running mean, or ``sample`` where that is lower: timings are disturbed upwards only (compilation, other
    processes), so a fast sample replaces an estimate that a slow one had inflated, while a slow one moves it by
    30%."""
    return min(_running(previous, sample), sample)
