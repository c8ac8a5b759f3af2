"""Compiled loops over a layout's edges: the sparsity pattern of A, the edges' mean log-conductivities, A's entries
and the log-conductivity gradient.

numpy does each in several passes over the 2M edges of a 1024x1024 grid (sorts, gathers, products, scatters), each
pass a stream through memory; one loop visits every edge once. Imported on first use, so that ``import flowlearn``
does not load numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(nogil=True, parallel=True, cache=True)
def fill_matrix(
    transmissibility, row_a, num_free_edges, indptr, entry_source, num_free, data
):  # pragma: no cover
    """Write the entries of A (see :mod:`flowlearn.darcy.assembly`) in storage order into ``data`` (nnz,).

    transmissibility: float64 (num_edges,), free-free edges first; row_a: (num_edges,) row of every edge's free end;
    indptr: (num_free+1,) the CSC column pointers; entry_source: (nnz,) per stored entry, its row where it is a
    diagonal entry, else num_free + its edge. A column holds its row's free-free edges, so each diagonal entry is
    summed from its own column's entries, column by column on the threads the caller gives numba
    (:func:`flowlearn.threads.kernel_threads`); only the few free-Dirichlet edges are summed on one core first."""
    boundary = np.zeros(num_free)
    for e in range(num_free_edges, row_a.size):
        boundary[row_a[e]] += transmissibility[e]
    for column in prange(num_free):
        total, diagonal_at = boundary[column], indptr[column]
        for k in range(indptr[column], indptr[column + 1]):
            source = entry_source[k]
            if source < num_free:
                diagonal_at = k
            else:
                coupling = transmissibility[source - num_free]
                data[k] = -coupling
                total += coupling
        data[diagonal_at] = total


@njit(nogil=True, parallel=True, cache=True)
def edge_means(slot_a, slot_b, values, out):  # pragma: no cover - compiled
    """(v[slot_a] + v[slot_b]) / 2 of every edge into ``out`` (num_edges,), for one sample's flattened field v
    (num_values,) float64; slot_a, slot_b: (num_edges,) int32 entries of v."""
    for e in prange(out.size):
        out[e] = 0.5 * (values[slot_a[e]] + values[slot_b[e]])


@njit(nogil=True, fastmath=True, cache=True)
def add_log_k_gradient(
    node_a, node_b, slot_a, slot_b, transmissibility, adjoint, heads, out
):  # pragma: no cover - compiled
    """Add dL/dv of one sample of a geometric-mean field to ``out`` (num_values,): every edge e = (a, b), whose
    T_e = aol_e·exp((v[slot_a] + v[slot_b])/2), adds

        dL/dT_e * dT_e/dv = -(lam_a - lam_b) (h_a - h_b) * T_e / 2

    to both of its slots (:mod:`flowlearn.darcy.solve`). node_a, node_b: (num_edges,) pixels; slot_a, slot_b:
    (num_edges,) entries of v; transmissibility: float64 (num_edges,); adjoint: lam, float64 (num_nodes,), 0 off
    the free nodes; heads: h, float64 (num_nodes,)."""
    for e in range(node_a.size):
        a, b = node_a[e], node_b[e]
        share = -0.5 * transmissibility[e] * (adjoint[a] - adjoint[b]) * (heads[a] - heads[b])
        out[slot_a[e]] += share
        out[slot_b[e]] += share


@njit(nogil=True, fastmath=True, cache=True)
def add_edge_gradient(
    node_a, node_b, slot, transmissibility, adjoint, heads, out
):  # pragma: no cover - compiled
    """Add dL/dT of one sample to ``out`` (num_values,) for a field that is the edges' T itself (T_e = v[slot]):
    dL/dT_e = -(lam_a - lam_b) (h_a - h_b). Arguments as :func:`add_log_k_gradient`'s (``transmissibility`` is
    not read: the rule's derivative is 1)."""
    for e in range(node_a.size):
        a, b = node_a[e], node_b[e]
        out[slot[e]] -= (adjoint[a] - adjoint[b]) * (heads[a] - heads[b])


@njit(cache=True)
def csc_pattern(num_free, row_a, row_b):  # pragma: no cover - compiled
    """The CSC pattern of A (:mod:`flowlearn.darcy.assembly`): the diagonal and both triangles of the free-free
    edges e, which join rows row_a[e] and row_b[e] (num_free_edges,). Returns int32 (indptr (num_free+1,), indices
    (nnz,), entry_source (nnz,)): rows sorted within each column, and per entry its row where it is a diagonal one,
    else num_free + its edge. A counting sort by column, then an insertion sort of each column's few rows."""
    counts = np.ones(num_free, dtype=np.int64)
    for e in range(row_b.size):
        counts[row_a[e]] += 1
        counts[row_b[e]] += 1
    indptr = np.zeros(num_free + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(counts)
    indices = np.empty(indptr[-1], dtype=np.int32)
    source = np.empty(indptr[-1], dtype=np.int32)
    filled = indptr[:-1].copy()
    for j in range(num_free):
        indices[filled[j]], source[filled[j]] = j, j
        filled[j] += 1
    for e in range(row_b.size):
        for column, row in ((row_a[e], row_b[e]), (row_b[e], row_a[e])):
            indices[filled[column]], source[filled[column]] = row, num_free + e
            filled[column] += 1
    for j in range(num_free):
        for k in range(indptr[j] + 1, indptr[j + 1]):
            row, value, i = indices[k], source[k], k
            while i > indptr[j] and indices[i - 1] > row:
                indices[i], source[i] = indices[i - 1], source[i - 1]
                i -= 1
            indices[i], source[i] = row, value
    return indptr.astype(np.int32), indices, source


def compiled() -> bool:
    """Whether numba's cache (``__pycache__`` beside this file, or ``NUMBA_CACHE_DIR``) holds the assembly kernel
    every solve runs, compiled from this source by an earlier process. Where it does not (a fresh clone, an edited
    source), the first solve of a process compiles the kernels: 4-8 s on 2 cores, once.

    Reads numba's own cache index (not a public API): where that fails, True, so that nothing is announced."""
    try:
        return bool(fill_matrix._cache._cache_file._load_index())
    except Exception:  # numba's internals moved
        return True
