"""Solves with a simplicial LDL^T factor, split over the cores along the elimination tree.

A training loop that reuses an old factor as CG preconditioner spends most of its time in the factor's
triangular solves. They are bound by memory bandwidth, and one core cannot draw all of it, but CHOLMOD's
simplicial solve runs on one core (and scikit-sparse holds the GIL through it). This module solves with the same
factor on all cores.

Nested dissection makes it possible: the elimination tree's top separator splits the unknowns into subtrees that
share no factor entries. Each task (one per core) takes a set of whole subtrees. The forward solve ``L y = b``
runs the tasks side by side and then the few top-separator columns; the backward solve ``L^T x = D^{-1} y`` runs
the top columns first, then the tasks side by side. A task's forward updates to top rows go to a private
accumulator, so no two tasks ever write the same entry.

Within a task, columns are walked by supernode: runs of columns j, j+1, ... whose patterns nest. The rows below
a supernode are then gathered or scattered once per supernode instead of once per column, and the entries stream
from memory contiguously, the way CHOLMOD's own solve groups up to four columns.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

# Subtrees are split until the busiest task has at most _SPLIT_IMBALANCE times an even share of the work, or
# the top (solved on one core) holds more than _TOP_SHARE of it.
_SPLIT_IMBALANCE = 1.05
_TOP_SHARE = 0.1
# The fewest unknowns a task of a permutation moves: handing a slice to the pool and waiting for it costs about
# 40 us, what one core takes to move 60,000 of them (at 66,560 unknowns one task took 35 us, two 76 us; at
# 262,144, 246 us against 188).
PERMUTE_TASK_UNKNOWNS = 150_000


@dataclass(frozen=True)
class TreePlan:
    """How the columns of one factor pattern are shared among tasks (int64 arrays).

    Attributes:
        indptr: (n+1,) column pointers of the factor the plan was made for.
        supernodes: (S+1,) first column of each supernode, then n; no supernode spans two tasks.
        task_supernodes: per task, its supernodes' indices in increasing order.
        top_supernodes: supernodes that belong to no task (the top separators), in increasing order.
        direct_rows: (S,) per supernode, how many of the rows below it its own task writes directly; the others
            are top rows and go through the task's accumulator.
        top_columns: (T,) the columns of the top supernodes.
        top_position: (n,) index of a column in ``top_columns``, -1 for task columns.
        widest: the most entries of any column, so at least the rows below any supernode.
    """

    indptr: np.ndarray
    supernodes: np.ndarray
    task_supernodes: tuple[np.ndarray, ...]
    top_supernodes: np.ndarray
    direct_rows: np.ndarray
    top_columns: np.ndarray
    top_position: np.ndarray
    widest: int

    @property
    def tasks(self) -> int:
        return len(self.task_supernodes)


def plan_tree(factor: sp.csc_matrix, tasks: int) -> TreePlan:
    """Share the columns of a postordered factor (CSC, sorted rows, diagonal first) among ``tasks`` tasks."""
    indptr = factor.indptr.astype(np.int64)
    indices = factor.indices
    n = factor.shape[0]
    counts = np.diff(indptr)
    parent = _parents(indptr, indices)
    owner = np.full(n, -1, dtype=np.int64)
    size = _subtree_sizes(parent)
    first = np.arange(n) - size + 1  # in a postorder, the subtree of j is first[j]..j
    if tasks > 1 and _is_postordered(parent, first):
        work_before = np.concatenate(([0], np.cumsum(counts)))
        work = work_before[np.arange(n) + 1] - work_before[first]
        for task, roots in enumerate(_share_subtrees(parent, work, tasks)):
            for root in roots:
                owner[first[root] : root + 1] = task
    supernodes = _find_supernodes(indptr, indices, owner)
    owner_of_supernode = owner[supernodes[:-1]]
    used = [t for t in range(tasks) if np.any(owner_of_supernode == t)]
    top_columns = np.flatnonzero(owner < 0)
    top_position = np.full(n, -1, dtype=np.int64)
    top_position[top_columns] = np.arange(top_columns.size)
    return TreePlan(
        indptr=indptr,
        supernodes=supernodes,
        task_supernodes=tuple(np.flatnonzero(owner_of_supernode == t) for t in used),
        top_supernodes=np.flatnonzero(owner_of_supernode < 0),
        direct_rows=_direct_rows(indptr, indices, supernodes, owner),
        top_columns=top_columns,
        top_position=top_position,
        widest=int(counts.max(initial=1)),
    )


@njit(cache=True)
def _is_postordered(parent, first):
    """Whether every subtree j is the run of columns first[j]..j: then each node's children's runs, taken in
    increasing order, tile first[j]..j-1 one after another."""
    next_start = first.copy()  # where the run of each node's next child must begin
    for child in range(parent.size):
        node = parent[child]
        if node >= 0:
            if first[child] != next_start[node]:
                return False
            next_start[node] = child + 1
    return bool(np.all(next_start == np.arange(parent.size)))


def _share_subtrees(parent: np.ndarray, work: np.ndarray, tasks: int) -> list[list[int]]:
    """Roots of disjoint subtrees for each task, balanced by work (factor entries).

    Starting from the tree's roots, the heaviest subtree is split into its children (its root joins the top)
    until the subtrees can be dealt to the tasks, heaviest first to the least loaded, within
    ``_SPLIT_IMBALANCE`` of an even share, or the top holds more than ``_TOP_SHARE`` of the work."""
    candidates = list(np.flatnonzero(parent < 0))
    total = work[candidates].sum()
    while True:
        candidates.sort(key=lambda root: -work[root])
        loads, shares = [0] * tasks, [[] for _ in range(tasks)]
        for root in candidates:
            least = loads.index(min(loads))
            loads[least] += work[root]
            shares[least].append(int(root))
        top_work = total - sum(loads)
        if max(loads) <= _SPLIT_IMBALANCE * total / tasks or top_work > _TOP_SHARE * total:
            return shares
        heaviest = candidates.pop(0)
        children = np.flatnonzero(parent == heaviest)
        if children.size == 0:
            return shares
        candidates.extend(children)


@njit(cache=True)
def _subtree_sizes(parent):
    size = np.ones(parent.size, dtype=np.int64)
    for j in range(parent.size):  # children come before parents
        if parent[j] >= 0:
            size[parent[j]] += size[j]
    return size


@njit(cache=True)
def _find_supernodes(indptr, indices, owner):
    """Column j+1 continues j's supernode when it is j's parent with j's pattern minus one row, and both belong
    to the same task."""
    n = indptr.size - 1
    starts = [0]
    for j in range(n - 1):
        count = indptr[j + 1] - indptr[j]
        continues = (
            count > 1
            and indices[indptr[j] + 1] == j + 1
            and indptr[j + 2] - indptr[j + 1] == count - 1
            and owner[j] == owner[j + 1]
        )
        if not continues:
            starts.append(j + 1)
    starts.append(n)
    return np.array(starts, dtype=np.int64)


@njit(cache=True)
def _direct_rows(indptr, indices, supernodes, owner):
    direct = np.empty(supernodes.size - 1, dtype=np.int64)
    for q in range(supernodes.size - 1):
        last = supernodes[q + 1] - 1
        task = owner[last]
        k = indptr[last] + 1
        if task >= 0:
            while k < indptr[last + 1] and owner[indices[k]] == task:
                k += 1
        else:
            k = indptr[last + 1]
        direct[q] = k - indptr[last] - 1
    return direct


# The kernels below index with unsigned integers (``_U``): numba checks every signed index for a negative value to
# wrap around, and on the short loops at the bottom of the tree (most columns hold fewer than ten entries) those
# checks took half the time. Unsigned, the solve at 1024x1024 runs 1.4x faster.
_U = np.uint64


@njit(nogil=True, fastmath=True, cache=True)
def _forward(
    indptr, indices, values, supernodes, order, direct_rows, top_position, inverse_pivots, x, top_sums, below
):  # fmt: skip
    """Solve the unit lower triangle of L in place on x for the supernodes ``order``, ascending, and return their
    share of ``y . D^{-1} y`` (each column's y is final when its turn comes: the energy costs no pass of its own).

    Updates of rows past ``direct_rows`` go to ``top_sums`` (indexed by ``top_position``) instead of x."""
    energy = 0.0
    for position in range(order.size):
        q = _U(order[position])
        start, stop = _U(supernodes[q]), _U(supernodes[q + _U(1)])
        first, end = _U(indptr[stop - _U(1)] + 1), _U(indptr[stop])  # the rows below, in the last column
        m, split = end - first, _U(direct_rows[q])
        if stop - start == _U(1):  # most supernodes are single columns: scatter straight from the column
            xc = x[start]
            energy += xc * xc * inverse_pivots[start]
            for k in range(first, first + split):
                x[_U(indices[k])] -= values[k] * xc
            for k in range(first + split, end):
                top_sums[_U(top_position[_U(indices[k])])] -= values[k] * xc
            continue
        for c in range(start, stop):  # the dense triangle inside the supernode
            inside, xc = _U(indptr[c]) + _U(1), x[c]
            energy += xc * xc * inverse_pivots[c]
            for k in range(stop - c - _U(1)):
                x[c + _U(1) + k] -= values[inside + k] * xc
        if m == 0:
            continue
        for i in range(m):
            below[i] = 0.0
        for c in range(start, stop):  # the rows below: every column's share summed before one scatter
            column, xc = _U(indptr[c]) + stop - c, x[c]
            for i in range(m):
                below[i] += values[column + i] * xc
        for i in range(split):
            x[_U(indices[first + i])] -= below[i]
        for i in range(split, m):
            top_sums[_U(top_position[_U(indices[first + i])])] -= below[i]
    return energy


@njit(nogil=True, fastmath=True, cache=True)
def _backward(indptr, indices, values, supernodes, order, inverse_pivots, x, below):
    """Solve ``L^T x = D^{-1} x`` in place for the supernodes ``order``, descending (``inverse_pivots`` holds
    D^{-1}: a product per column where a division took several times longer)."""
    for position in range(order.size - 1, -1, -1):
        q = _U(order[position])
        start, stop = _U(supernodes[q]), _U(supernodes[q + _U(1)])
        first, end = _U(indptr[stop - _U(1)] + 1), _U(indptr[stop])
        if stop - start == _U(1):
            total = 0.0
            for k in range(first, end):
                total += values[k] * x[_U(indices[k])]
            x[start] = x[start] * inverse_pivots[start] - total
            continue
        m = end - first
        for i in range(m):  # the rows below, gathered once for all the supernode's columns
            below[i] = x[_U(indices[first + i])]
        c = stop
        while c > start:
            c -= _U(1)
            inside, column = _U(indptr[c]) + _U(1), _U(indptr[c]) + stop - c
            total = 0.0
            for k in range(stop - c - _U(1)):
                total += values[inside + k] * x[c + _U(1) + k]
            for i in range(m):
                total += values[column + i] * below[i]
            x[c] = x[c] * inverse_pivots[c] - total


@njit(nogil=True, cache=True)
def _gather(source, index, out, start, stop):
    """out[start:stop] = source[index[start:stop]]."""
    for i in range(start, stop):
        out[i] = source[_U(index[i])]


@njit(nogil=True, cache=True)
def _scatter(source, index, out, start, stop):
    """out[index[start:stop]] = source[start:stop]."""
    for i in range(start, stop):
        out[_U(index[i])] = source[i]


def in_postorder(
    factor: sp.csc_matrix, pivots: np.ndarray, permutation: np.ndarray
) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
    """The same LDL^T factor (CSC, sorted rows, diagonal first; pivots and fill-reducing permutation as
    :class:`TreeSolver` takes them) with its columns renumbered in a postorder of its elimination tree, which
    :func:`plan_tree` needs to share subtrees among tasks; returned as given where they already are in one.

    CHOLMOD's supernodal factors come postordered, but their relaxed supernodes' padding, once dropped
    (:func:`ldl_from_cholesky`), can leave a tree that is not (a full tensor's 9-point factor at 1024x1024). Every
    entry L_ij (i > j) joins column j to an ancestor, and a postorder numbers each column after its descendants, so
    the renumbered factor stays lower triangular with the same entries: it factors ``A[p][:, p]`` for the
    renumbered permutation p."""
    parent = _parents(factor.indptr.astype(np.int64), factor.indices)
    if _is_postordered(parent, np.arange(parent.size) - _subtree_sizes(parent) + 1):
        return factor, pivots, permutation
    order = _postorder(parent)  # order[k]: the column that comes k-th
    renumbered = factor[order][:, order].tocsc()
    renumbered.sort_indices()
    return renumbered, pivots[order], permutation[order]


def _parents(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The elimination tree of a factor (CSC, sorted rows, diagonal first): each column's first row below the
    diagonal, -1 at a root."""
    counts = np.diff(indptr)
    parent = np.full(counts.size, -1, dtype=np.int64)
    below = counts > 1
    parent[below] = indices[indptr[:-1][below] + 1]
    return parent


@njit(cache=True)
def _postorder(parent):  # pragma: no cover - compiled
    """A postorder of the forest ``parent``: children in increasing order, each subtree's columns contiguous."""
    n = parent.size
    count = np.zeros(n + 1, dtype=np.int64)
    for j in range(n):
        if parent[j] >= 0:
            count[parent[j] + 1] += 1
    start = np.cumsum(count)
    children = np.empty(max(start[-1], 1), dtype=np.int64)
    filled = start[:-1].copy()
    for j in range(n):  # increasing j: each node's children in increasing order
        if parent[j] >= 0:
            children[filled[parent[j]]] = j
            filled[parent[j]] += 1
    order = np.empty(n, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    visited = np.zeros(n, dtype=np.int64)  # children of each stacked node already pushed
    out = 0
    for root in range(n):
        if parent[root] >= 0:
            continue
        top = 0
        stack[0] = root
        while top >= 0:
            node = stack[top]
            if visited[node] < start[node + 1] - start[node]:
                stack[top + 1] = children[start[node] + visited[node]]
                visited[node] += 1
                top += 1
            else:
                order[out] = node
                out += 1
                top -= 1
    return order


def ldl_from_cholesky(factor_l: sp.csc_matrix) -> tuple[sp.csc_matrix, np.ndarray]:
    """The LDL^T factor that :class:`TreeSolver` reads, from a Cholesky factor ``L L^T`` (CSC float64, sorted rows,
    diagonal first): the unit lower triangle ``L[:, j] / L_jj`` (CSC float64, its unit diagonal stored) and the
    pivots ``D_jj = L_jj^2``, float64 (n,). The exact zeros a supernodal factor pads its dense blocks with are
    dropped, which leaves the simplicial factor's pattern. ``factor_l`` is consumed: its index and value arrays
    are overwritten (a copy would cost 0.6 GB at 1024x1024)."""
    indptr, indices, values, pivots = _unit_columns(
        factor_l.indptr.astype(np.int64), factor_l.indices, factor_l.data
    )
    return sp.csc_matrix((values, indices, indptr), shape=factor_l.shape), pivots


@njit(cache=True)
def _unit_columns(indptr, indices, values):
    """The arrays of :func:`ldl_from_cholesky`, compacted in place over ``indices`` and ``values``."""
    n = indptr.size - 1
    kept = np.empty_like(indptr)
    pivots = np.empty(n)
    kept[0] = 0
    out = 0
    for j in range(n):
        pivot = values[indptr[j]]
        pivots[j] = pivot * pivot
        indices[out], values[out] = j, 1.0
        out += 1
        for k in range(indptr[j] + 1, indptr[j + 1]):
            if values[k] != 0.0:
                indices[out], values[out] = indices[k], values[k] / pivot
                out += 1
        kept[j + 1] = out
    # Copies, so that the padded arrays (a third longer at 1024x1024) are freed.
    return kept, indices[:out].copy(), values[:out].copy(), pivots


class TreeSolver:
    """Applies ``A^{-1}`` from a simplicial LDL^T of A, on several cores: exactly that factor's inverse, whatever
    the precision of L's entries (the arithmetic is float64).

    Args:
        factor_l: The unit lower triangle L, CSC (n, n) float32 or float64 with sorted rows, diagonal first (its
            stored diagonal is not read).
        pivots: float64 (n,), D.
        permutation: (n,) the fill-reducing ordering: ``L D L^T = A[p][:, p]``.
        plan: From :func:`plan_tree` for this pattern (a pattern's plan serves all its factors).

    :meth:`round` drops L's entries to float32 once the factor only preconditions other matrices.
    """

    def __init__(
        self, factor_l: sp.csc_matrix, pivots: np.ndarray, permutation: np.ndarray, plan: TreePlan
    ) -> None:
        if not np.array_equal(factor_l.indptr, plan.indptr):
            raise ValueError("the factor's pattern differs from the plan's")
        self._indptr = plan.indptr
        self._indices = factor_l.indices
        self._values = factor_l.data
        self._inverse_pivots = 1.0 / np.asarray(pivots, dtype=np.float64)
        # int64: numpy would convert CHOLMOD's int32 permutation at every gather.
        self._permutation = np.asarray(permutation, dtype=np.int64)
        self._plan = plan
        # The slice of the permutation each task moves.
        tasks = min(max(plan.tasks, 1), max(permutation.size // PERMUTE_TASK_UNKNOWNS, 1))
        self._slices = np.linspace(0, permutation.size, tasks + 1).astype(np.int64)

    @property
    def rounded(self) -> bool:
        """Whether L's entries are float32."""
        return self._values.dtype == np.float32

    def round(self) -> None:
        """Round L's entries to float32, for a factor that now only preconditions CG on other matrices: the solves
        stream a third fewer bytes per entry and run 6-13% faster at 1024x1024, and the factor takes 140 MB less.
        A rounded factor preconditions as well as the exact one: the matrices it serves differ from its own by far
        more than float32's 6e-8. D and the arithmetic stay float64."""
        if not self.rounded:
            self._values = self._values.astype(np.float32)

    def apply(self, rhs: np.ndarray) -> np.ndarray:
        """``A^{-1} rhs`` for rhs float64 (n,)."""
        return self.split(rhs)[1]()

    def split(self, rhs: np.ndarray) -> tuple[float, Callable[[], np.ndarray]]:
        """``A^{-1} rhs`` in two halves, as CG takes it (:data:`~flowlearn.engines.pcg.Split`): the forward
        substitution ``y = L^{-1} P rhs`` gives ``rhs . A^{-1} rhs = y . D^{-1} y`` at once, and the returned
        function finishes with the backward substitution (call it once at most). A converged CG solve stops after
        the first half, which is 45% of the work at 1024x1024."""
        plan = self._plan
        pattern = (self._indptr, self._indices, self._values, plan.supernodes)
        x = np.empty_like(rhs)
        self._permute(_gather, rhs, x)
        top_sums = np.zeros((plan.tasks, plan.top_columns.size))
        # Per task, scratch for the rows below a supernode.
        below = np.empty((max(plan.tasks, 1), plan.widest))
        energies = np.zeros(max(plan.tasks, 1))  # each task's share of y . D^{-1} y

        def forward(task: int, order: np.ndarray, sums: np.ndarray) -> None:
            energies[task] += _forward(
                *pattern,
                order,
                plan.direct_rows,
                plan.top_position,
                self._inverse_pivots,
                x,
                sums,
                below[task],
            )

        def backward(task: int, order: np.ndarray) -> None:
            _backward(*pattern, order, self._inverse_pivots, x, below[task])

        _run_tasks(lambda task: forward(task, plan.task_supernodes[task], top_sums[task]), plan.tasks)
        x[plan.top_columns] += top_sums.sum(axis=0)
        forward(0, plan.top_supernodes, np.empty(0))  # top supernodes write every row directly

        def rest() -> np.ndarray:
            backward(0, plan.top_supernodes)
            _run_tasks(lambda task: backward(task, plan.task_supernodes[task]), plan.tasks)
            solution = np.empty_like(x)
            self._permute(_scatter, x, solution)
            return solution

        return float(energies.sum()), rest

    def _permute(self, kernel, source: np.ndarray, out: np.ndarray) -> None:
        """Run a permutation kernel on a slice per task, as many tasks as :data:`PERMUTE_TASK_UNKNOWNS` allows: a
        random access per unknown, which one core does at a fraction of the bandwidth (numpy's gather and scatter
        took 8-10 ms at 1024x1024, the tasks take 2)."""
        bounds = self._slices
        _run_tasks(
            lambda task: kernel(source, self._permutation, out, bounds[task], bounds[task + 1]),
            bounds.size - 1,
        )


_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_pool_lock = threading.Lock()


def _run_tasks(work, tasks: int) -> None:
    """Run ``work(0..tasks-1)``: task 0 on this thread, the others on a shared pool (the kernels drop the GIL)."""
    global _pool, _pool_workers
    if tasks > 1:
        with _pool_lock:
            if _pool is None or _pool_workers < tasks - 1:
                _pool = ThreadPoolExecutor(max_workers=tasks - 1, thread_name_prefix="flowlearn-trisolve")
                _pool_workers = tasks - 1
            futures = [_pool.submit(work, task) for task in range(1, tasks)]
    if tasks > 0:
        work(0)
    if tasks > 1:
        for future in futures:
            future.result()


if hasattr(os, "register_at_fork"):  # a forked child (a DataLoader worker, a launcher) has no pool threads

    def _forget_pool() -> None:
        global _pool, _pool_workers
        _pool, _pool_workers = None, 0

    os.register_at_fork(after_in_child=_forget_pool)
