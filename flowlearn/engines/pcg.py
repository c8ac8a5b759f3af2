"""Preconditioned conjugate gradients with an energy-norm stopping rule and an honest failure mode.

Two implementations of one algorithm: :func:`pcg` for one system in numpy (updates in place, by one-thread BLAS or,
on large vectors, by compiled loops on all cores; for the CPU engines) and :func:`batched_pcg` for B systems in
lockstep in torch (any device, for the GPU engine). Both stop when sqrt(r.M^{-1}r) <= rtol * sqrt(b.x) -- for M close to A the relative error in the energy norm -- confirmed on the
true residual b - A x, and report a miss instead of returning silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from numba import njit, prange
from scipy.linalg.blas import daxpy

from flowlearn.sparse import csr_product


def symmetric_product(matrix: sp.spmatrix) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`csr_product` of a symmetric float64 matrix: a CSC one's arrays are also its CSR arrays."""
    if sp.issparse(matrix) and matrix.format == "csc":
        matrix = sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape)
    elif not sp.issparse(matrix) or matrix.format != "csr":
        matrix = sp.csr_matrix(matrix)
    return csr_product(matrix)


@dataclass
class PCGResult:
    solution: np.ndarray
    iterations: int
    converged: bool
    error_estimate: float  # estimated relative error in the energy norm


# Fewest unknowns for which CG updates its vectors on all cores. Below, its six vectors fit in cache, and one core
# is as fast as two that must be woken (262,144 unknowns: 0.42-0.52 ms an iteration either way).
THREADED_SIZE = 500_000

# A preconditioner handed to :func:`pcg` in two halves: r -> (r.M^{-1}r, a function that returns M^{-1}r). A factor
# M = L D L^T knows r.M^{-1}r = y.D^{-1}y after its forward substitution y = L^{-1}r alone, so CG can test for
# convergence before paying the backward substitution, which only a further iteration needs.
Split = Callable[[np.ndarray], tuple[float, Callable[[], np.ndarray]]]


def whole(precondition: Callable[[np.ndarray], np.ndarray]) -> Split:
    """The :data:`Split` of a preconditioner that has no cheaper first half: all its work, then a dot product."""

    def split(r: np.ndarray) -> tuple[float, Callable[[], np.ndarray]]:
        z = precondition(r)
        return float(r @ z), lambda: z

    return split


def pcg(
    product: Callable[[np.ndarray], np.ndarray],
    rhs: np.ndarray,
    precondition: Split,
    x0: np.ndarray | None,
    rtol: float,
    max_iter: int,
    x0_image: np.ndarray | None = None,
) -> PCGResult:
    """Solve the SPD system ``A x = rhs`` by CG preconditioned with ``precondition`` (~ A^{-1}).

    Stops when sqrt(r.M^{-1}r) <= rtol * sqrt(b.x): for M close to A this is the relative error in the energy
    norm. The stopping test is confirmed on the true residual b - A x, so round-off drift in the recursive
    residual cannot end the iteration early (the iteration restarts from the true residual instead). The test
    needs only the first half of a :data:`Split` preconditioner: the last application of a solve costs half.

    Args:
        product: x -> A x for x float64 (n,), A SPD (:func:`symmetric_product` of a matrix).
        rhs: float64 (n,).
        precondition: an approximation of A^{-1}, as a :data:`Split` (:func:`whole` wraps a plain function).
        x0: starting guess (n,), or None for zero.
        rtol: relative tolerance on the energy-norm error.
        max_iter: iteration limit; hitting it returns ``converged=False``, never a silent answer.
        x0_image: ``A x0`` where the caller has it already (a product saved), else None.
    """
    rhs = np.asarray(rhs, dtype=np.float64)
    if not np.any(rhs):
        return PCGResult(np.zeros_like(rhs), 0, True, 0.0)
    # Vectors are updated in place: on large grids, temporaries cost as much as the arithmetic.
    x = np.zeros_like(rhs) if x0 is None else np.array(x0, dtype=np.float64)  # a contiguous copy
    r = rhs - (product(x) if x0_image is None else x0_image)
    rz, rest = precondition(r)
    rz_previous = rz
    p = None  # the search direction; None until the first step, and again after a restart
    estimate = np.inf
    vectors = _ThreadedVectors if rhs.size >= THREADED_SIZE else _BlasVectors
    scale = abs(float(rhs @ x))
    for iteration in range(max_iter + 1):
        estimate = np.sqrt(abs(rz) / scale) if scale > 0 else np.inf
        if estimate <= rtol:
            # Trust the recursive residual only while it still tracks the true one (round-off drift).
            true_residual = rhs - product(x)
            if np.linalg.norm(true_residual - r) <= 0.5 * np.linalg.norm(r):
                return PCGResult(x, iteration, True, estimate)
            r = true_residual
            rz, rest = precondition(r)
            p = None
            continue
        if iteration == max_iter:
            break
        z = rest()
        if p is None:
            p = z.copy()
        else:
            vectors.direction(p, z, rz / rz_previous)
        q = product(p)
        scale = abs(vectors.step(x, r, p, q, rz / vectors.dot(p, q), rhs))
        rz_previous = rz
        rz, rest = precondition(r)
    return PCGResult(x, max_iter, False, float(estimate))


class _BlasVectors:
    """CG's vector updates in place through one-thread BLAS: on vectors that fit in cache, the fastest."""

    @staticmethod
    def dot(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b)

    @staticmethod
    def direction(p: np.ndarray, z: np.ndarray, beta: float) -> None:
        """p = z + beta p."""
        p *= beta
        p += z

    @staticmethod
    def step(
        x: np.ndarray, r: np.ndarray, p: np.ndarray, q: np.ndarray, alpha: float, rhs: np.ndarray
    ) -> float:
        """x += alpha p and r -= alpha q; returns rhs . x, the scale of the stopping test."""
        daxpy(p, x, a=alpha)
        daxpy(q, r, a=-alpha)
        return float(rhs @ x)


# CG's vector updates as compiled loops on all cores, the step fused into one pass: on vectors that spill from
# cache they are bound by memory bandwidth, which one core cannot draw (1024x1024: 1.9 against 4.0 ms an iteration
# on 2 cores).


@njit(parallel=True, fastmath=True, nogil=True, cache=True)
def _threaded_dot(a, b):  # pragma: no cover - compiled
    total = 0.0
    for i in prange(a.size):
        total += a[i] * b[i]
    return total


@njit(parallel=True, fastmath=True, nogil=True, cache=True)
def _threaded_direction(p, z, beta):  # pragma: no cover - compiled
    for i in prange(p.size):
        p[i] = z[i] + beta * p[i]


@njit(parallel=True, fastmath=True, nogil=True, cache=True)
def _threaded_step(x, r, p, q, alpha, rhs):  # pragma: no cover - compiled
    total = 0.0
    for i in prange(x.size):
        moved = x[i] + alpha * p[i]
        x[i] = moved
        r[i] -= alpha * q[i]
        total += rhs[i] * moved
    return total


class _ThreadedVectors:
    """:class:`_BlasVectors`' operations by the compiled loops above."""

    dot = staticmethod(_threaded_dot)
    direction = staticmethod(_threaded_direction)
    step = staticmethod(_threaded_step)


@dataclass
class BatchedPCGResult:
    solution: torch.Tensor  # (B, n)
    iterations: int  # iterations of the slowest item
    converged: torch.Tensor  # bool (B,)
    error_estimate: torch.Tensor  # (B,) estimated relative energy-norm error


def batched_pcg(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    precondition: Callable[[torch.Tensor], torch.Tensor],
    rhs: torch.Tensor,
    x0: torch.Tensor | None,
    rtol: float,
    max_iter: int,
) -> BatchedPCGResult:
    """Solve B independent SPD systems ``A_i x_i = b_i`` by preconditioned CG, in lockstep.

    The stopping rule is :func:`pcg`'s, per item (an item whose recursive residual has drifted restarts from the
    true one instead of stopping). Items that have converged stop moving.

    Args:
        matvec: (B, n) -> (B, n), applies every A_i to its own vector.
        precondition: (B, n) -> (B, n), applies an approximation of every A_i^{-1}.
        rhs: float64 (B, n).
        x0: Starting guess (B, n), or None for zero.
        rtol: Relative energy-norm tolerance.
        max_iter: Iteration limit; items that miss it come back with ``converged`` False.
    """
    x = torch.zeros_like(rhs) if x0 is None else x0.clone()
    r = rhs - matvec(x)
    z = precondition(r)
    rz = (r * z).sum(dim=1)
    p = z.clone()
    # A zero right-hand side has the exact solution zero, whatever the starting guess.
    done = ~rhs.any(dim=1)
    x[done] = 0.0
    for iteration in range(max_iter + 1):
        scale = (rhs * x).sum(dim=1).abs()
        estimate = torch.where(
            scale > 0, (rz.abs() / scale.clamp_min(torch.finfo(rhs.dtype).tiny)).sqrt(), torch.inf
        )
        candidates = (estimate <= rtol) & ~done
        restart = torch.zeros_like(done)
        if bool(candidates.any()):
            true_residual = rhs - matvec(x)
            tracks = (true_residual - r).norm(dim=1) <= 0.5 * r.norm(dim=1)
            done |= candidates & tracks
            restart = candidates & ~tracks
            if bool(restart.any()):
                # Restarted items re-test the stopping rule on the true residual before moving again.
                r = torch.where(restart[:, None], true_residual, r)
                z = precondition(r)
                rz = torch.where(restart, (r * z).sum(dim=1), rz)
                p = torch.where(restart[:, None], z, p)
        if bool(done.all()):
            return BatchedPCGResult(x, iteration, done, torch.where(done, 0.0, estimate))
        if iteration == max_iter:
            break
        moving = ~done & ~restart
        q = matvec(p)
        pq = (p * q).sum(dim=1)
        alpha = torch.where(moving, rz / torch.where(moving, pq, 1.0), 0.0)
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * q
        z = precondition(r)
        rz_next = (r * z).sum(dim=1)
        beta = torch.where(moving, rz_next / torch.where(moving, rz, 1.0), 0.0)
        p = z + beta[:, None] * p
        rz = rz_next
    return BatchedPCGResult(x, max_iter, done, estimate)
