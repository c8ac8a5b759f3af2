"""Smoothed-aggregation multigrid on the pixel grid: the preconditioner of one-off solves on 2D grids.

A matrix that will not be reused (predict, the first step of a run) is not worth a sparse factorisation: one
multigrid hierarchy costs a few sweeps over the grid, and CG preconditioned by its V-cycle reaches the same
tolerance in 20-30 iterations, whatever the grid's size. The free-node system of a 2D grid is a 5-point stencil on
the image (9 points for a full transmissivity tensor); every level keeps it on a grid, so the hierarchy is a
handful of (H, W) arrays and every operation is a compiled loop over them.

Each level holds a symmetric 9-point stencil ``A`` (the finest one of a scalar or per-axis conductivity has only 5
points) as its diagonal ``d`` and the couplings to the four "forward" neighbours, east (i, j+1), north (i+1, j),
north-east (i+1, j+1) and north-west (i+1, j-1); the couplings to the other four are those of the neighbour's
forward ones. Pixels that carry no unknown (inactive, or of fixed head) are decoupled placeholders: d = 1, no
couplings, zero right-hand side.

Coarsening aggregates 3x3 blocks of pixels. The tentative prolongation P0 copies a block's coarse value to its
pixels; smoothing it with one damped-Jacobi step gives

    P   = (I - w D^{-1} A) P0,          w = 4 / (3 rho),   rho >= rho(D^{-1} A) (Gershgorin)
    A_c = P^T A P                         (Galerkin; a 9-point stencil again on the coarse grid)

(Vanek, Mandel & Brezina 1996). Neither P nor A_c is ever stored as a sparse matrix: P and P^T are applied
through one stencil product each, and A_c is read off nine probes A_c v_c, where v_c is 1 on the coarse nodes of
one of the nine classes (I mod 3, J mod 3) and 0 elsewhere: within any 3x3 neighbourhood every class appears once.

The V-cycle smooths with one multicolour Gauss-Seidel sweep before the coarse correction and the same sweep with
its colours reversed after it: a symmetric cycle, so a valid CG preconditioner. The colours (red-black on a
5-point finest level, four on 9-point ones) uncouple the nodes they update, so a row's updates carry no
dependency from one node to the next and vectorise, unlike a lexicographic sweep's. The coarsest level (at most
``COARSEST`` nodes) is solved by the inverse of its dense Cholesky factorisation. The hierarchy is built in float64
and cycled in float32: a preconditioner needs no more digits, the cycle's time goes into streaming its arrays from
memory, and CG itself runs in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from numba import njit, prange

from flowlearn.engines.inverse import Factor
from flowlearn.engines.pcg import PCGResult, pcg, whole
from flowlearn.threads import kernel_threads, single_threaded_blas

if TYPE_CHECKING:
    from flowlearn.darcy.assembly import SystemLayout

# The coarsest level is factored densely once it has at most this many nodes.
COARSEST = 400
# CG iterations after which the engine factors instead (CG needs 20-30 to reach 1e-11 on fracture grids).
GIVE_WAY_AFTER = 100
# Power iterations estimating rho(D^{-1} A) on each level.
POWER_ITERATIONS = 15
# Forward neighbours (row offset, column offset) in the order of the couplings array.
FORWARD = ((0, 1), (1, 0), (1, 1), (1, -1))


@dataclass
class _Level:
    """One level, on a grid padded by a ring of zeros so that the loops need no bounds checks.

    Attributes:
        diagonal: float64 (H+2, W+2) (float32 in the cycle's copy); 1 on placeholders and on the ring.
        couplings: float64 or float32 (4, H+2, W+2), the entries a[p, p + FORWARD[k]]; 0 wherever either end is a
            placeholder or on the ring.
        kept: bool (H+2, W+2), the pixels that carry an unknown.
        omega: Damping of the prolongation smoother, 4 / (3 rho).
    """

    diagonal: np.ndarray
    couplings: np.ndarray
    kept: np.ndarray
    omega: float
    colours: int  # of the smoother: 2 for the finest level's 5-point stencil, 4 for 9 points

    @cached_property
    def inverse_diagonal(self) -> np.ndarray:
        return 1.0 / self.diagonal

    @cached_property
    def scratch(self) -> np.ndarray:
        """Work space of the prolongation."""
        return np.zeros_like(self.diagonal)

    @cached_property
    def work(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Work space of the cycle, reused by every cycle: fresh arrays each time, zeroed by the system, cost more
        than their arithmetic on large grids (every page faults anew). (x, residual) on this level and the
        restricted residual on the level below; the rings of the last two stay zero."""
        return np.empty_like(self.diagonal), np.zeros_like(self.diagonal), _coarse_grid(self)

    def single(self) -> _Level:
        """This level in float32, for the cycle."""
        as32 = (x.astype(np.float32) for x in (self.diagonal, self.couplings))
        return _Level(*as32, self.kept, self.omega, self.colours)

    @property
    def shape(self) -> tuple[int, int]:
        return self.diagonal.shape[0] - 2, self.diagonal.shape[1] - 2


class Multigrid(Factor):
    """One symmetric V-cycle of a smoothed-aggregation hierarchy, as an approximate inverse of the free-node matrix.

    Args:
        matrix: SPD float64 (n, n), CSC, the free-node system: free node i is pixel ``pixels[i]``, and every
            off-diagonal entry couples two pixels that are 4-neighbours on the grid.
        pixels: int64 (n,), flat image (C-order) index of each free node.
        shape: Image shape (H, W).

    Raises:
        numpy.linalg.LinAlgError: the coarsest matrix is not positive definite (a singular system), or the
            hierarchy leaves float32's range (conductances beyond about 1e+-38).
    """

    exact = False
    ages = False
    reusable = False
    give_way_after = GIVE_WAY_AFTER

    def __init__(self, matrix: sp.csc_matrix, pixels: np.ndarray, shape: tuple[int, int]) -> None:
        height, width = shape
        rows, cols = (x + 1 for x in np.divmod(pixels.astype(np.int64), width))
        # Flat index of each free node in the padded arrays: scatter and gather with one index.
        self._padded_index = rows * (width + 2) + cols
        diagonal = np.ones((height + 2, width + 2))
        couplings = np.zeros((4, height + 2, width + 2))
        _fill_finest(matrix.indptr, matrix.indices, matrix.data, rows, cols, diagonal, couplings)
        kept = np.zeros((height + 2, width + 2), dtype=bool)
        kept[rows, cols] = True
        # Red-black uncouples a 5-point stencil; the full tensor's diagonals (a 9-point one) need four colours.
        colours = 4 if couplings[2:].any() else 2
        with kernel_threads(diagonal.size):
            self.levels = [_level(diagonal, couplings, kept, colours=colours)]
        while self.levels[-1].kept[1:-1, 1:-1].size > COARSEST:
            with kernel_threads(self.levels[-1].diagonal.size):  # the work is the finer level's
                self.levels.append(_coarsen(self.levels[-1]))
        with np.errstate(over="ignore", divide="ignore"):  # what overflows is refused just below
            self._cycle_levels = [level.single() for level in self.levels]
        if not _representable(self.levels[-1], self._cycle_levels):
            raise np.linalg.LinAlgError("the multigrid hierarchy's entries leave float32's range")
        coarsest = scipy.linalg.cho_factor(_dense(self.levels[-1]))
        self._coarsest_inverse = scipy.linalg.cho_solve(coarsest, np.eye(coarsest[0].shape[0]))

    def apply(self, rhs: np.ndarray) -> np.ndarray:
        return self._gather(self._precondition(self._scatter(rhs)))

    def cg(
        self,
        matrix: sp.csc_matrix,
        rhs: np.ndarray,
        x0: np.ndarray | None,
        rtol: float,
        max_iter: int,
        x0_image: np.ndarray | None = None,
    ) -> PCGResult:
        """CG on the padded image rather than on the free nodes (``matrix`` is the one the hierarchy was built
        from): the product is then the finest stencil and the cycle needs no scatter or gather. Placeholders keep
        b = 0 and so x = 0, which makes it the same iteration. The product is a stencil kernel like the cycle's,
        rather than torch's CSR product: torch's threads, woken between the kernels, cost more than they save
        (2x slower at 66k unknowns on 2 cores)."""
        finest = self.levels[0]
        zeros, image = np.zeros_like(finest.diagonal), np.zeros_like(finest.diagonal)

        def product(x: np.ndarray) -> np.ndarray:
            _residual(finest.diagonal, finest.couplings, zeros, x.reshape(zeros.shape), image)  # 0 - A x
            return -image.ravel()

        start, start_image = (None if x is None else self._scatter(x).ravel() for x in (x0, x0_image))
        with kernel_threads(zeros.size):
            result = pcg(
                product,
                self._scatter(rhs).ravel(),
                whole(self._precondition),
                start,
                rtol,
                max_iter,
                start_image,
            )
        return replace(result, solution=self._gather(result.solution))

    def _scatter(self, free: np.ndarray) -> np.ndarray:
        """Free-node vector (n,) -> padded float64 image, zero elsewhere."""
        padded = np.zeros_like(self.levels[0].diagonal)
        padded.ravel()[self._padded_index] = free
        return padded

    def _gather(self, padded: np.ndarray) -> np.ndarray:
        """Padded image (any shape of its size) -> free-node float64 vector (n,)."""
        return padded.ravel()[self._padded_index].astype(np.float64, copy=False)

    def _precondition(self, residual: np.ndarray) -> np.ndarray:
        """One V-cycle on a padded float64 residual (any shape of its size), in float32; float64 of its shape."""
        b = residual.reshape(self.levels[0].diagonal.shape).astype(np.float32)
        return self._cycle(0, b).astype(np.float64).reshape(residual.shape)

    def _cycle(self, depth: int, b: np.ndarray) -> np.ndarray:
        """x ~ A^{-1} b on level ``depth``, padded float32 arrays."""
        level = self._cycle_levels[depth]
        x, residual, coarse_b = level.work
        x.fill(0.0)
        if depth == len(self.levels) - 1:
            x[1:-1, 1:-1] = (self._coarsest_inverse @ b[1:-1, 1:-1].ravel()).reshape(level.shape)
            return x
        # Each level on the threads its size is worth: the coarse ones are too small to pay for waking any.
        with kernel_threads(b.size):
            _smooth(level.inverse_diagonal, level.couplings, level.colours, b, x, True)
            _residual(level.diagonal, level.couplings, b, x, residual)
            coarse_x = self._cycle(depth + 1, _restrict(level, residual, coarse_b))
            _prolong_add(level.diagonal, level.couplings, level.omega, coarse_x, level.scratch, x)
            _smooth(level.inverse_diagonal, level.couplings, level.colours, b, x, False)
        return x


def one_off_hierarchy(layout: SystemLayout, matrix: sp.csc_matrix) -> Multigrid | None:
    """The hierarchy of ``matrix``, the free-node system of ``layout``, as the preconditioner of a one-off solve
    (:attr:`flowlearn.engines.factor.FactorEngine.one_off`); None where it does not apply (a grid other than 2D)
    or fails, so that the engine factorises instead."""
    if len(layout.shape) != 2:
        return None
    try:
        with single_threaded_blas():  # BLAS threads would only contend with the kernels' own
            return Multigrid(matrix, layout.free_nodes, layout.shape)
    except np.linalg.LinAlgError:  # a coarsest level left indefinite by round-off, or overflowed: factor
        return None


def _level(diagonal: np.ndarray, couplings: np.ndarray, kept: np.ndarray, colours: int) -> _Level:
    """A level of the given stencil, with the damping of its prolongation smoother."""
    rho = _spectral_radius(diagonal, couplings, kept, refine=colours == 4)
    return _Level(diagonal, couplings, kept, 4.0 / (3.0 * rho), colours)


def _spectral_radius(diagonal: np.ndarray, couplings: np.ndarray, kept: np.ndarray, refine: bool) -> float:
    """An upper estimate of rho(D^{-1} A): the Gershgorin bound max_i sum_j |a_ij| / a_ii, lowered (``refine``)
    to 1.05 times a power iteration's estimate where that is less. The bound is tight for the finest 5-point
    stencil (rho ~ 2) but overestimates rho of the coarse 9-point ones by up to 30 %; prolongations smoothed with
    the sharper estimates take CG from 23 to 19 iterations on the 256x260 benchmark fracture, 25 to 20 at 1024^2."""
    if not kept.any():
        return 1.0
    zeros = np.zeros_like(diagonal)
    row_sums = np.zeros_like(diagonal)  # sum_j |a_ij| = 0 - |A| (-1)
    _residual(np.abs(diagonal), np.abs(couplings), zeros, -np.ones_like(diagonal), row_sums)
    bound = float((row_sums / diagonal)[kept].max())
    if not refine:
        return bound
    x = np.random.default_rng(0).random(diagonal.shape) * kept  # seeded: the same matrix, the same hierarchy
    image = np.zeros_like(diagonal)
    estimate = 0.0
    for _ in range(POWER_ITERATIONS):
        x /= np.linalg.norm(x)
        _residual(diagonal, couplings, zeros, -x, image)  # A x
        x = image / diagonal
        estimate = float(np.linalg.norm(x))
    return min(bound, 1.05 * estimate)


def _coarse_grid(fine: _Level) -> np.ndarray:
    """Zeros on the padded grid of the level below ``fine`` (3x3 blocks, the last ones clipped)."""
    height, width = fine.shape
    return np.zeros((-(-height // 3) + 2, -(-width // 3) + 2), dtype=fine.diagonal.dtype)


def _restrict(fine: _Level, residual: np.ndarray, coarse: np.ndarray | None = None) -> np.ndarray:
    """P^T r = P0^T (I - w A D^{-1}) r, padded coarse array: ``coarse``, overwritten, where given."""
    if coarse is None:
        coarse = _coarse_grid(fine)
    else:
        coarse.fill(0.0)
    _restrict_kernel(fine.diagonal, fine.couplings, fine.omega, residual, fine.scratch, coarse)
    return coarse


def _coarsen(fine: _Level) -> _Level:
    """The Galerkin level P^T A P below ``fine``, read off nine probes."""
    coarse_kept = _coarse_grid(fine)
    _aggregate(fine.kept.astype(np.float64), fine.kept, coarse_kept)
    kept = coarse_kept > 0
    diagonal = np.ones_like(coarse_kept)
    couplings = np.zeros((4, *coarse_kept.shape))
    zeros = np.zeros_like(fine.diagonal)
    for class_row in range(3):
        for class_col in range(3):
            probe = np.zeros_like(coarse_kept)
            probe[class_row::3, class_col::3] = kept[class_row::3, class_col::3]
            prolonged = np.zeros_like(fine.diagonal)
            _prolong_add(fine.diagonal, fine.couplings, fine.omega, probe, fine.scratch, prolonged)
            product = np.zeros_like(prolonged)
            _residual(fine.diagonal, fine.couplings, zeros, -prolonged, product)  # 0 - A(-Pv) = APv
            product *= fine.kept  # P^T sums over pixels with unknowns only
            _read_probe(_restrict(fine, product), kept, class_row, class_col, diagonal, couplings)
    return _level(diagonal, couplings, kept, colours=4)


def _representable(coarsest: _Level, cycle_levels: list[_Level]) -> bool:
    """Whether the hierarchy can precondition: ``coarsest`` (float64) finite, and in every level of the cycle
    (float32) the diagonal and its reciprocal finite, which bounds the couplings too (|a_ij| <= sqrt(a_ii a_jj)).
    Conductances near float64's limits overflow in the Galerkin products, inf and NaN spreading down the levels;
    float32 holds only 1e-38 to 3e38."""
    with np.errstate(over="ignore", divide="ignore"):
        return all(
            np.isfinite(x).all()
            for x in (
                coarsest.diagonal,
                coarsest.couplings,
                *(y for level in cycle_levels for y in (level.diagonal, level.inverse_diagonal)),
            )
        )


def _dense(level: _Level) -> np.ndarray:
    """The level's matrix as a dense (H*W, H*W) array over its unpadded grid (placeholders as identity rows)."""
    height, width = level.shape
    n = height * width
    index = np.arange(n).reshape(height, width)
    matrix = np.diag(level.diagonal[1:-1, 1:-1].ravel())
    for (di, dj), coupling in zip(FORWARD, level.couplings):
        inner = coupling[1:-1, 1:-1]
        rows, cols = np.nonzero(inner)
        neighbours = index[rows + di, cols + dj]
        matrix[index[rows, cols], neighbours] = inner[rows, cols]
        matrix[neighbours, index[rows, cols]] = inner[rows, cols]
    return matrix


# -- compiled kernels (padded arrays: interior rows and columns 1..H, 1..W) ---------------------------------------


@njit(cache=True, error_model="numpy")
def _fill_finest(indptr, indices, data, rows, cols, diagonal, couplings):  # pragma: no cover - compiled
    """Scatter the CSC free-node matrix, a 5-point or (full tensor) 9-point stencil, onto the stencil arrays (only
    the forward couplings are kept)."""
    for column in range(indptr.size - 1):
        ci, cj = rows[column], cols[column]
        for entry in range(indptr[column], indptr[column + 1]):
            ri, rj = rows[indices[entry]], cols[indices[entry]]
            if ri == ci and rj == cj:
                diagonal[ci, cj] = data[entry]
            elif ri == ci and rj == cj + 1:
                couplings[0, ci, cj] = data[entry]
            elif ri == ci + 1 and rj == cj:
                couplings[1, ci, cj] = data[entry]
            elif ri == ci + 1 and rj == cj + 1:
                couplings[2, ci, cj] = data[entry]
            elif ri == ci + 1 and rj == cj - 1:
                couplings[3, ci, cj] = data[entry]


@njit(cache=True, error_model="numpy")
def _stencil(couplings, x, i, j):  # pragma: no cover - compiled
    """Sum of the off-diagonal terms of row (i, j) of A x."""
    e, n, ne, nw = couplings[0], couplings[1], couplings[2], couplings[3]
    return (
        e[i, j] * x[i, j + 1]
        + n[i, j] * x[i + 1, j]
        + ne[i, j] * x[i + 1, j + 1]
        + nw[i, j] * x[i + 1, j - 1]
        + e[i, j - 1] * x[i, j - 1]
        + n[i - 1, j] * x[i - 1, j]
        + ne[i - 1, j - 1] * x[i - 1, j - 1]
        + nw[i - 1, j + 1] * x[i - 1, j + 1]
    )


@njit(parallel=True, cache=True, error_model="numpy")
def _residual(diagonal, couplings, b, x, out):  # pragma: no cover - compiled
    """out = b - A x over the interior."""
    for i in prange(1, diagonal.shape[0] - 1):
        for j in range(1, diagonal.shape[1] - 1):
            out[i, j] = b[i, j] - diagonal[i, j] * x[i, j] - _stencil(couplings, x, i, j)


@njit(parallel=True, cache=True, error_model="numpy")
def _smooth(inverse_diagonal, couplings, colours, b, x, forward):  # pragma: no cover - compiled
    """One multicolour Gauss-Seidel sweep, its colours in order when ``forward``, in reverse otherwise (the forward
    sweep's adjoint). Four colours, (i mod 2, j mod 2), uncouple a 9-point stencil; two, red and black by
    (i + j) mod 2, a 5-point one. Nodes of one colour are never coupled: a colour's rows run in parallel, and a
    row's updates are computed for every node in one contiguous (vectorised) pass, then stored at the colour's."""
    height, width = inverse_diagonal.shape[0] - 2, inverse_diagonal.shape[1] - 2
    row_step = 2 if colours == 4 else 1
    for step in range(colours):
        colour = step if forward else colours - 1 - step
        first_row = 1 + colour // 2
        for k in prange((height - first_row) // row_step + 1):
            i = first_row + k * row_step
            row = np.empty(width + 2, dtype=x.dtype)
            for j in range(1, width + 1):
                row[j] = (b[i, j] - _stencil(couplings, x, i, j)) * inverse_diagonal[i, j]
            for j in range(1 + (colour % 2 if colours == 4 else (i + colour) % 2), width + 1, 2):
                x[i, j] = row[j]


@njit(parallel=True, cache=True, error_model="numpy")
def _prolong_add(diagonal, couplings, omega, coarse, injected, x):  # pragma: no cover - compiled
    """x += P coarse = (I - w D^{-1} A) P0 coarse, with ``injected`` as scratch for P0 coarse (each pixel takes its
    3x3 block's value). P0 is 1 at placeholders too, unlike in the hierarchy's definition: a placeholder is
    coupled to nothing, so what it holds never reaches a pixel that carries an unknown."""
    height, width = diagonal.shape[0] - 2, diagonal.shape[1] - 2
    for i in prange(1, height + 1):
        for j in range(1, width + 1):
            injected[i, j] = coarse[(i - 1) // 3 + 1, (j - 1) // 3 + 1]
    for i in prange(1, height + 1):
        for j in range(1, width + 1):
            product = diagonal[i, j] * injected[i, j] + _stencil(couplings, injected, i, j)
            x[i, j] += injected[i, j] - omega * product / diagonal[i, j]


@njit(parallel=True, cache=True, error_model="numpy")
def _restrict_kernel(diagonal, couplings, omega, residual, scaled, coarse):  # pragma: no cover - compiled
    """coarse = P^T r = P0^T (r - w A D^{-1} r): each 3x3 block's sum, ``scaled`` the scratch for D^{-1} r.
    Placeholders must hold r = 0 (they do in the cycle: they are decoupled, with b = 0). Block rows run in
    parallel: no two write the same coarse entry."""
    height, width = diagonal.shape[0] - 2, diagonal.shape[1] - 2
    for i in prange(1, height + 1):
        for j in range(1, width + 1):
            scaled[i, j] = residual[i, j] / diagonal[i, j]
    coarse_height, coarse_width = coarse.shape[0] - 2, coarse.shape[1] - 2
    for block_row in prange(1, coarse_height + 1):
        row = np.zeros(3 * coarse_width + 1, dtype=residual.dtype)  # past column W stays 0
        for i in range(3 * block_row - 2, min(3 * block_row, height) + 1):
            for j in range(1, width + 1):
                row[j] = residual[i, j] - omega * (residual[i, j] + _stencil(couplings, scaled, i, j))
            for block in range(coarse_width):
                coarse[block_row, block + 1] += row[3 * block + 1] + row[3 * block + 2] + row[3 * block + 3]


@njit(cache=True, error_model="numpy")
def _aggregate(fine, kept, coarse):  # pragma: no cover - compiled
    """coarse = P0^T fine: each block's sum over its kept pixels."""
    height, width = fine.shape[0] - 2, fine.shape[1] - 2
    for i in range(1, height + 1):
        for j in range(1, width + 1):
            if kept[i, j]:
                coarse[(i - 1) // 3 + 1, (j - 1) // 3 + 1] += fine[i, j]


@njit(cache=True, error_model="numpy")
def _read_probe(image, kept, class_row, class_col, diagonal, couplings):  # pragma: no cover - compiled
    """Entries of A_c from one probe's image A_c v: at a kept node p, image[p] is the entry coupling p to the one
    node of the probed class among p and its eight neighbours. Stores the diagonal and the forward couplings."""
    height, width = image.shape[0] - 2, image.shape[1] - 2
    for i in range(1, height + 1):
        for j in range(1, width + 1):
            if not kept[i, j]:
                continue
            di = (class_row - i) % 3
            dj = (class_col - j) % 3
            di = -1 if di == 2 else di
            dj = -1 if dj == 2 else dj
            if di == 0 and dj == 0:
                diagonal[i, j] = image[i, j]
            elif di == 0 and dj == 1:
                couplings[0, i, j] = image[i, j]
            elif di == 1 and dj == 0:
                couplings[1, i, j] = image[i, j]
            elif di == 1 and dj == 1:
                couplings[2, i, j] = image[i, j]
            elif di == 1 and dj == -1:
                couplings[3, i, j] = image[i, j]
