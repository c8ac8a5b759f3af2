"""Preconditioned conjugate gradients with an energy-norm stopping rule and an honest failure mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import daxpy


@dataclass
class PCGResult:
    solution: np.ndarray
    iterations: int
    converged: bool
    error_estimate: float  # estimated relative error in the energy norm


def pcg(
    matrix: sp.spmatrix,
    rhs: np.ndarray,
    precondition: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray | None,
    rtol: float,
    max_iter: int,
) -> PCGResult:
    """Solve the SPD system ``matrix @ x = rhs`` by CG preconditioned with ``precondition`` (~ A^{-1}).

    Stops when sqrt(r.M^{-1}r) <= rtol * sqrt(b.x): for M close to A this is the relative error in the energy
    norm. The stopping test is confirmed on the true residual b - A x, so round-off drift in the recursive
    residual cannot end the iteration early (the iteration restarts from the true residual instead).

    Args:
        matrix: SPD float64 (n, n).
        rhs: float64 (n,).
        precondition: applies an approximation of A^{-1} to a vector (n,).
        x0: starting guess (n,), or None for zero.
        rtol: relative tolerance on the energy-norm error.
        max_iter: iteration limit; hitting it returns ``converged=False``, never a silent answer.
    """
    rhs = np.asarray(rhs, dtype=np.float64)
    if not np.any(rhs):
        return PCGResult(np.zeros_like(rhs), 0, True, 0.0)
    # Vectors are updated in place through BLAS: on large grids, temporaries cost as much as the arithmetic.
    x = np.zeros_like(rhs) if x0 is None else np.array(x0, dtype=np.float64)  # a contiguous copy, for BLAS
    r = rhs - matrix @ x
    z = precondition(r)
    rz = float(r @ z)
    p = z.copy()
    estimate = np.inf
    for iteration in range(max_iter + 1):
        scale = abs(float(rhs @ x))
        estimate = np.sqrt(abs(rz) / scale) if scale > 0 else np.inf
        if estimate <= rtol:
            # Trust the recursive residual only while it still tracks the true one (round-off drift).
            true_residual = rhs - matrix @ x
            if np.linalg.norm(true_residual - r) <= 0.5 * np.linalg.norm(r):
                return PCGResult(x, iteration, True, estimate)
            r = true_residual
            z = precondition(r)
            rz = float(r @ z)
            p = z.copy()
            continue
        if iteration == max_iter:
            break
        q = matrix @ p
        alpha = rz / float(p @ q)
        daxpy(p, x, a=alpha)
        daxpy(q, r, a=-alpha)
        z = precondition(r)
        rz_next = float(r @ z)
        p *= rz_next / rz
        p += z
        rz = rz_next
    return PCGResult(x, max_iter, False, float(estimate))
