"""Products of scipy sparse matrices with vectors on all cores, through torch's CSR kernel where that pays."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
import torch

# Fewest stored entries for which torch's threaded product beats scipy's one-core product. Below, waking torch's
# threads costs more than the product: on 2 cores scipy is 5x faster at 4k unknowns (20k entries) and 3x at 16k,
# torch 1.2x faster at 66k (330k entries) and 1.7x at 1M.
THREADED_ENTRIES = 160_000


def csr_product(matrix: sp.csr_matrix) -> Callable[[np.ndarray], np.ndarray]:
    """``x -> matrix @ x`` for a float64 CSR matrix and x float64 (n,) or (n, k): from ``THREADED_ENTRIES``
    entries by torch's CSR kernel on all of torch's threads, reading the matrix's own arrays (no copy), with the
    index arrays made int32 where they fit (torch's fast path, twice as fast as int64); below, by scipy."""
    if matrix.nnz < THREADED_ENTRIES:
        return matrix.__matmul__
    index_type = np.int32 if matrix.nnz < 2**31 else np.int64
    indptr, indices = (
        torch.from_numpy(np.asarray(a, dtype=index_type)) for a in (matrix.indptr, matrix.indices)
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
        csr = torch.sparse_csr_tensor(
            indptr, indices, torch.from_numpy(matrix.data), size=matrix.shape, check_invariants=False
        )

    def vector_product(x: np.ndarray) -> np.ndarray:
        return torch.mv(csr, torch.from_numpy(x)).numpy()

    # Not recursive: a closure that calls itself is a reference cycle, which keeps the matrix's arrays alive until
    # the garbage collector's rare full pass (a 5,000-step run's peak memory climbed by 60 MB on such cycles).
    def product(x: np.ndarray) -> np.ndarray:
        if x.ndim == 1:
            return vector_product(x)
        # Column by column: torch's sparse-dense matrix product is slower than k products with vectors.
        return np.stack([vector_product(np.ascontiguousarray(column)) for column in x.T], axis=1)

    return product


def diagonal_positions(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """int64 (n,): where each row's (or column's) diagonal entry sits in a CSR (or CSC) pattern; ValueError where
    one lacks it."""
    lines = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    positions = np.flatnonzero(indices == lines)
    if positions.size != indptr.size - 1:
        raise ValueError("every row of the pattern must hold its diagonal entry")
    return positions
