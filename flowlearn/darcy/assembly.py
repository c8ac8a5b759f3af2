"""Assembly of the free-node system ``A h_f = b`` from a conductivity field.

The sparsity pattern depends only on the problem and the conductivity's form, so :class:`SystemLayout` builds it
once (with the index maps that scatter edge conductances into CSC storage); each solve then only fills numbers in.
The same index maps fill a batch on any torch device (``torch_matrix_values``, ``torch_rhs``): the GPU engine's
assembly.

Edge transmissibility T_e from the flattened field v of one sample (:mod:`flowlearn.darcy.conductivity`): the
geometric mean of two nodes' conductivities (DPFEHM's convention) for the scalar and per-axis forms, the value
itself for the tensor scheme's edges,

    T_e = aol_e * exp((v[slot_a] + v[slot_b]) / 2)     or     T_e = v[slot_a],

    A_ii = sum over edges at i of T_e        (edges to Dirichlet neighbours included)
    A_ij = -T_e                              (both ends free)
    b_i  = Q_i + sum over Dirichlet neighbours d of T_e * h_d
"""

from __future__ import annotations

import threading
from functools import cache, cached_property

import numpy as np
import scipy.sparse as sp
import torch

from flowlearn.darcy.conductivity import candidate_edges
from flowlearn.darcy.grid import Grid
from flowlearn.sparse import diagonal_positions


class SystemLayout:
    """Index maps from the nodes and edges of a problem to the rows and CSC entries of ``A``.

    Nodes are numbered here by their flat index in the image (C order), not DPFEHM's node order: the solution does
    not depend on the numbering, and fields then flatten as views instead of transposed copies.

    Edges with an inactive end, and edges between two Dirichlet nodes, play no part and are dropped.
    ``edges`` lists the remaining ones as (pixel_a, pixel_b) flat image indices: first the free-free edges, then
    the free-Dirichlet edges with the free node first, each group sorted by (pixel_a, pixel_b). ``slots`` gives,
    per edge, the entries of the flattened field its transmissibility reads (module docstring).

    Args:
        grid: The grid.
        dirichlet: bool (grid.shape), the nodes whose head is fixed (counted where active).
        active: bool (grid.shape), the nodes that carry an equation or a fixed head.
        form: The conductivity's form (:mod:`flowlearn.darcy.conductivity`): ``scalar``, ``axes`` or ``edges``.
    """

    def __init__(self, grid: Grid, dirichlet: np.ndarray, active: np.ndarray, form: str = "scalar") -> None:
        kernels = _kernels_loaded()  # in the background, while the numpy work below runs
        active = active.reshape(-1)
        fixed = dirichlet.reshape(-1) & active
        free = active & ~fixed
        candidates = candidate_edges(grid, form)
        # The scalar form's edges read the values of their own two nodes: its slots are the edges themselves.
        own_nodes = candidates.slots is candidates.pixels
        (a, b), (slot_a, slot_b) = candidates.pixels.T, candidates.slots.T
        used = active[a] & active[b] & ~(fixed[a] & fixed[b])
        a, b = a[used], b[used]
        aol = candidates.areas_over_lengths[used]
        # Orient free-Dirichlet edges free-first so that column 0 is always a free node.
        # In place, since few are: about a thousand of the two million edges of a 1024x1024 map.
        flip = np.flatnonzero(fixed[a])
        a[flip], b[flip] = b[flip], a[flip]
        if not own_nodes:
            slot_a, slot_b = slot_a[used], slot_b[used]
            slot_a[flip], slot_b[flip] = slot_b[flip], slot_a[flip]
        both_free = free[b]
        # Within each group, edges follow the image order of their nodes: gathers and scatters over edges then
        # stream through memory. (DPFEHM's order walks the image with a stride of a whole row, and every access
        # would touch a new page: 3-5x slower on large grids.)
        # One int64 key, sorted stably (timsort on its presorted runs): 2x faster than np.lexsort's three keys.
        order = np.argsort((~both_free * grid.num_nodes + a) * grid.num_nodes + b, kind="stable")
        # Column-major, so that edges.T gives the two ends as contiguous arrays: fast gathers. Gathered straight
        # into their columns: stacking, then copying to column-major, took 3x as long at 1024x1024.
        self.edges = _gathered_columns(order, a, b)
        self.slots = self.edges if own_nodes else _gathered_columns(order, slot_a, slot_b)
        self.areas_over_lengths = aol[order]
        self.num_free_edges = int(both_free.sum())
        self.form, self.rule, self.num_values = form, candidates.rule, candidates.num_values

        self.num_nodes = grid.num_nodes
        self.shape = grid.shape  # image shape (H, W) or (D, H, W)
        self.free_nodes = np.flatnonzero(free)
        self.fixed_nodes = np.flatnonzero(fixed)
        self.num_free = self.free_nodes.size
        free_index = np.full(grid.num_nodes, -1, dtype=np.int64)
        free_index[self.free_nodes] = np.arange(self.num_free)
        # int32 index maps (as CSC indices are): the compiled assembly streams half the bytes of int64 ones.
        self.row_a = free_index[self.edges[:, 0]].astype(np.int32)  # row of the free end of every edge
        # The row of the other end, free-free edges.
        self.row_b = free_index[self.edges[: self.num_free_edges, 1]].astype(np.int32)
        self.free_mask = free
        self.fixed_mask = fixed
        self.active_mask = active
        kernels.join()
        self._build_pattern()
        self._torch_cache: dict = {}  # per device: index maps as tensors
        self._last_system: dict[int, tuple[np.ndarray, np.ndarray, sp.csc_matrix]] = {}

    def _build_pattern(self) -> None:
        """CSC pattern of the full symmetric ``A``: the diagonal plus both triangles of the free-free edges.

        ``_entry_source`` maps every stored entry to its value in ``[diagonal (num_free), -T of the free-free edges]``,
        so that filling the matrix is one gather that writes the entries in storage order.
        """
        from flowlearn.darcy.kernels import csc_pattern

        self.indptr, self.indices, self._entry_source = csc_pattern(
            self.num_free, self.row_a[: self.num_free_edges], self.row_b
        )

    @property
    def nnz(self) -> int:
        return self.indices.size

    @cached_property
    def diagonal_positions(self) -> np.ndarray:
        """int64 (num_free,): where each column's diagonal entry sits in the CSC storage."""
        return diagonal_positions(self.indptr, self.indices)

    @cached_property
    def value_mask(self) -> np.ndarray:
        """bool (num_values,): the entries of a field that must be finite: every active node's (per axis, for the
        axes form), and every edge's transmissibility that enters the system."""
        if self.rule == "geometric":
            return np.tile(self.active_mask, self.num_values // self.num_nodes)
        used = np.zeros(self.num_values, dtype=bool)
        used[self.slots[:, 0]] = True
        return used

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The shape a flat field index unravels into in messages: the image's, (axis, *image) per axis, or
        (edges,)."""
        if self.rule == "linear":
            return (self.num_values,)
        channels = self.num_values // self.num_nodes
        return self.shape if channels == 1 else (channels, *self.shape)

    @cached_property
    def value_range(self) -> tuple[float, float]:
        """(low, high): the field values for which the solves stay within float64, log-conductivities for the node
        forms and transmissibilities for the tensor's edges (where 0 is also fine: an edge that carries nothing).
        Between them every T_e and every diagonal entry of A (a sum over a node's edges) is so far from float64's
        limits that a sum of ``num_free`` squares of such numbers, or of their reciprocals, is a normal number: the
        solves form dot products of vectors scaled like A (residuals) and like its inverse (the adjoint's
        solutions, which scale as 1/T). Outside, a T_e or one of these overflows or vanishes, and a solve returns
        inf or NaN, or finds A singular."""
        if not self.areas_over_lengths.size:
            return -np.inf, np.inf
        limits = np.finfo(np.float64)
        edges_per_node = int(np.bincount(self.edges.reshape(-1), minlength=self.num_nodes).max())
        margin = 0.5 * np.log(max(self.num_free, 1))
        low = 0.5 * np.log(limits.tiny) + margin - np.log(self.areas_over_lengths.min())
        high = 0.5 * np.log(limits.max) - margin - np.log(edges_per_node * self.areas_over_lengths.max())
        return (
            (float(low), float(high))
            if self.rule == "geometric"
            else (float(np.exp(low)), float(np.exp(high)))
        )

    def system(self, slot: int, values: np.ndarray) -> tuple[np.ndarray, sp.csc_matrix]:
        """(T, A) for one sample's field (num_values,), flattened (module docstring).

        The last system of each batch slot is kept: the adjoint solve that follows a forward solve asks for the
        same one again, and so does the gradient (:meth:`last_transmissibilities`).
        """
        last = self._last_of(slot, values)
        if last is not None:
            return last[1], last[2]
        transmissibility = self.transmissibilities(values[None])[0]
        matrix = self.matrix(transmissibility)
        self._last_system[slot] = (values.copy(), transmissibility, matrix)
        return transmissibility, matrix

    def last_transmissibilities(self, values: np.ndarray) -> np.ndarray:
        """:meth:`transmissibilities` (B, num_edges) of a field (B, num_values), taken from each batch slot's last
        system where it was built from the same values."""
        rows = []
        for slot, sample in enumerate(values):
            last = self._last_of(slot, sample)
            rows.append(self.transmissibilities(sample[None])[0] if last is None else last[1])
        return rows[0][None] if len(rows) == 1 else np.stack(rows)  # one sample: a view, no 16 MB copy

    def _last_of(self, slot: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, sp.csc_matrix] | None:
        """The slot's last (values, T, A) where it was built from these values, else None."""
        last = self._last_system.get(slot)
        return last if last is not None and np.array_equal(last[0], values) else None

    def values_gradient(
        self, transmissibility: np.ndarray, adjoint: np.ndarray, heads: np.ndarray
    ) -> np.ndarray:
        """dL/dv, float64 (B, num_values), from T (B, num_edges), the adjoint lam (0 off the free nodes) and the
        heads h (B, num_nodes), flat image order: the rule of :mod:`flowlearn.darcy.solve`, one compiled pass over
        the edges per sample (5-8x faster than torch's gathers and scatters)."""
        from flowlearn.darcy.kernels import add_edge_gradient, add_log_k_gradient

        node_a, node_b, slot_a, slot_b = self._edge_ends
        gradient = np.zeros((adjoint.shape[0], self.num_values))
        for sample in range(adjoint.shape[0]):
            arguments = (transmissibility[sample], adjoint[sample], heads[sample], gradient[sample])
            if self.rule == "geometric":
                add_log_k_gradient(node_a, node_b, slot_a, slot_b, *arguments)
            else:
                add_edge_gradient(node_a, node_b, slot_a, *arguments)
        return gradient

    @cached_property
    def _edge_ends(self) -> tuple[np.ndarray, ...]:
        """The two pixels and the two slots of every edge as contiguous int32 arrays, for the compiled loops."""
        nodes = tuple(np.ascontiguousarray(end, dtype=np.int32) for end in self.edges.T)
        if self.slots is self.edges:
            return nodes + nodes
        return nodes + tuple(np.ascontiguousarray(end, dtype=np.int32) for end in self.slots.T)

    def transmissibilities(self, values: np.ndarray) -> np.ndarray:
        """Edge transmissibility T_e, float64 (B, num_edges), from a field (B, num_values), flattened (module
        docstring): the edges' means by one compiled pass per sample, then torch's vectorised exp (a compiled loop's
        scalar exp made the whole 1.7x slower at 1024x1024). A product with a sparse matrix of two halves a row took
        as long per call, but its matrix cost 43 ms and 80 MB to build there."""
        if self.rule == "linear":
            return values[:, self.slots[:, 0]]
        from flowlearn.darcy.kernels import edge_means
        from flowlearn.threads import kernel_threads

        _, _, slot_a, slot_b = self._edge_ends
        means = np.empty((values.shape[0], self.edges.shape[0]))
        with kernel_threads(means.shape[1]):
            for sample, row in zip(values, means):
                edge_means(slot_a, slot_b, np.ascontiguousarray(sample, dtype=np.float64), row)
        return torch.from_numpy(means).exp_().mul_(torch.from_numpy(self.areas_over_lengths)).numpy()

    def matrix(self, transmissibility: np.ndarray) -> sp.csc_matrix:
        """The SPD free-node matrix A (num_free, num_free) for one sample's T (num_edges,)."""
        from flowlearn.darcy.kernels import fill_matrix
        from flowlearn.threads import kernel_threads

        data = np.empty(self.nnz)
        with kernel_threads(self.nnz):
            fill_matrix(
                transmissibility,
                self.row_a,
                self.num_free_edges,
                self.indptr,
                self._entry_source,
                self.num_free,
                data,
            )
        return sp.csc_matrix((data, self.indices, self.indptr), shape=(self.num_free, self.num_free))

    def rhs(self, transmissibility: np.ndarray, heads: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """Right-hand side b (num_free,) for one sample: T (num_edges,), heads and sources (num_nodes,), flat image
        order."""
        boundary = slice(self.num_free_edges, None)
        inflow = transmissibility[boundary] * heads[self.edges[boundary, 1]]
        return sources[self.free_nodes] + np.bincount(self.row_a[boundary], inflow, self.num_free)

    def torch_transmissibilities(
        self, values: torch.Tensor, edges: torch.Tensor | None = None
    ) -> torch.Tensor:
        """T_e as a differentiable torch op: float64 (B, num_edges) from a field (B, num_values), flattened, on its
        device; only for ``edges`` (int64 indices on that device, (E',) -> (B, E')) where given."""
        slot_a, slot_b = self.torch_slots(values.device)
        aol = self.torch_tensors(values.device)[2]
        if edges is not None:
            slot_a, slot_b, aol = slot_a[edges], slot_b[edges], aol[edges]
        if self.rule == "linear":
            return values[:, slot_a]
        return aol * torch.exp(0.5 * (values[:, slot_a] + values[:, slot_b]))

    def torch_transmissibility_jvp(
        self, transmissibility: torch.Tensor, tangent: torch.Tensor
    ) -> torch.Tensor:
        """dT (B, num_edges) for a tangent dv (B, num_values) of the field that gave ``transmissibility``."""
        slot_a, slot_b = self.torch_slots(tangent.device)
        if self.rule == "linear":
            return tangent[:, slot_a]
        return 0.5 * transmissibility * (tangent[:, slot_a] + tangent[:, slot_b])

    def torch_values_vjp(self, transmissibility: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        """dL/dv (B, num_values) for dL/dT (B, num_edges), with T the field's ``transmissibility``: the adjoint of
        :meth:`torch_transmissibility_jvp`, in torch ops (differentiable again)."""
        slot_a, slot_b = self.torch_slots(gradient.device)
        out = gradient.new_zeros(gradient.shape[0], self.num_values)
        if self.rule == "linear":
            return out.index_add(1, slot_a, gradient)
        share = 0.5 * gradient * transmissibility
        return out.index_add(1, slot_a, share).index_add(1, slot_b, share)

    def torch_slots(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(slot_a, slot_b) as int64 tensors on ``device``."""
        key = ("slots", device)
        if key not in self._torch_cache:
            self._torch_cache[key] = tuple(
                torch.as_tensor(np.ascontiguousarray(x), dtype=torch.int64, device=device)
                for x in self.slots.T
            )
        return self._torch_cache[key]

    def torch_matrix_values(self, transmissibility: torch.Tensor) -> torch.Tensor:
        """Entries of A for a batch, float64 (B, nnz), from T (B, num_edges), on T's device.

        They follow ``indices``/``indptr``: the CSC storage of :meth:`matrix`, which is also the CSR storage of A
        since A is symmetric.
        """
        row_a, row_b, entry_source = self.torch_index_maps(transmissibility.device)[:3]
        t_free = transmissibility[:, : self.num_free_edges]
        diagonal = transmissibility.new_zeros(transmissibility.shape[0], self.num_free)
        diagonal = diagonal.index_add(1, row_a, transmissibility).index_add(1, row_b, t_free)
        return torch.cat([diagonal, -t_free], dim=1)[:, entry_source]

    def torch_rhs(
        self, transmissibility: torch.Tensor, heads: torch.Tensor, sources: torch.Tensor
    ) -> torch.Tensor:
        """Right-hand sides b, float64 (B, num_free), from T (B, num_edges) and heads and sources (B, num_nodes),
        flat image order, on their device."""
        node_b = self.torch_tensors(transmissibility.device)[1]
        row_a, _, _, free_nodes, _ = self.torch_index_maps(transmissibility.device)
        boundary = slice(self.num_free_edges, None)
        inflow = transmissibility[:, boundary] * heads[:, node_b[boundary]]
        return sources[:, free_nodes].index_add(1, row_a[boundary], inflow)

    def torch_index_maps(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(row_a, row_b, entry_source, free_nodes, fixed_nodes) as int64 tensors on ``device``."""
        key = ("maps", device)
        if key not in self._torch_cache:
            arrays = (self.row_a, self.row_b, self._entry_source, self.free_nodes, self.fixed_nodes)
            self._torch_cache[key] = tuple(
                torch.as_tensor(x, dtype=torch.int64, device=device) for x in arrays
            )
        return self._torch_cache[key]

    def torch_tensors(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(pixel_a, pixel_b, areas_over_lengths, free, fixed, active) as tensors on ``device``; flat image order."""
        if device not in self._torch_cache:
            arrays = (
                *self.edges.T,
                self.areas_over_lengths,
                self.free_mask,
                self.fixed_mask,
                self.active_mask,
            )
            self._torch_cache[device] = tuple(
                torch.as_tensor(np.ascontiguousarray(x), device=device) for x in arrays
            )
        return self._torch_cache[device]


@cache
def _kernels_loaded() -> threading.Thread:
    """A thread, started on the first call in a process, that loads the compiled kernels of this module.

    In a fresh process the first compiled call costs 0.4 s: numba's import and its compiler's registries, pure Python
    that holds the interpreter lock. The sorts and gathers of a large layout release the lock, so the two overlap:
    a 1024x1024 one-off solve in a fresh process takes 0.1 s less. The layout joins the thread before its own
    first compiled call (an import under way in one thread is waited for by any other)."""

    def load() -> None:
        from flowlearn.darcy.kernels import csc_pattern
        from flowlearn.runtime import collection_paused

        empty = np.zeros(0, dtype=np.int32)
        # numba's first compiled call builds its registries, with 0.1 s of full collections after torch's import.
        with collection_paused(then="resume"):
            csc_pattern(0, empty, empty)  # the argument types of _build_pattern's call

    thread = threading.Thread(target=load, name="flowlearn-kernels", daemon=True)
    thread.start()
    return thread


def _gathered_columns(order: np.ndarray, *columns: np.ndarray) -> np.ndarray:
    """A column-major (len(order), len(columns)) array whose column j is ``columns[j][order]``."""
    out = np.empty((order.size, len(columns)), dtype=np.result_type(*columns), order="F")
    for j, column in enumerate(columns):
        np.take(column, order, out=out[:, j])
    return out
