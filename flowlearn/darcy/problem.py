"""The steady Darcy problem on a grid: which nodes are active, fixed (Dirichlet) or free, and the sources.

The equation of a free node i, as in DPFEHM's ``groundwater`` model, is

    sum over edges e = (i, j):  K_e * aol_e * (h_i - h_j) = Q_i,

where a Dirichlet neighbour's head is known, K_e is the edge conductivity and aol_e the face area over the node
distance. Dirichlet nodes are eliminated and carry no equation; inactive nodes (for example zero-aperture contact
spots of a fracture) are removed from the graph altogether.
"""

from __future__ import annotations

import copy
from functools import cached_property

import numpy as np
from scipy import ndimage

from flowlearn.checks import is_real, nonfinite, shown
from flowlearn.darcy.assembly import SystemLayout
from flowlearn.darcy.grid import Grid, check_argument
from flowlearn.errors import DisconnectedRegionError, ProblemError

_MAX_LISTED_REGIONS = 5


class DarcyProblem:
    """Boundary conditions, sources and active nodes of a steady Darcy solve on ``grid``.

    All arrays are in image layout, i.e. shaped like ``grid.shape``: (H, W) or (D, H, W).

    Args:
        grid: The grid.
        dirichlet: bool array, True where the head is fixed.
        dirichlet_values: Head at the Dirichlet nodes, metres (values elsewhere are ignored); a scalar broadcasts.
        sources: Volumetric source Q at each node, m^3/s, positive = injection; default none.
        active: bool array, False where a node carries no equation (a contact spot); default all active.
        drop_unconnected: Make active regions with no path to a Dirichlet node inactive instead of raising
            :class:`DisconnectedRegionError`.

    Raises:
        ProblemError: for an argument of the wrong type (a grid that is not a :class:`Grid`, heads or sources that
            are not numbers, a non-bool ``drop_unconnected``), a wrong shape, non-finite values, no active
            Dirichlet node or no free node.
        DisconnectedRegionError: for active regions with no path to a Dirichlet node (unless dropped).
    """

    def __init__(
        self,
        grid: Grid,
        dirichlet: np.ndarray,
        dirichlet_values: np.ndarray | float,
        sources: np.ndarray | None = None,
        active: np.ndarray | None = None,
        drop_unconnected: bool = False,
    ) -> None:
        if not isinstance(grid, Grid):
            raise ProblemError(
                f"grid must be a Grid, got {type(grid).__name__} (make one with Grid.from_image(shape), or the "
                "fracture setup with DarcyProblem.fracture(shape))"
            )
        # A string is truthy: "no" would drop the regions it was meant to refuse.
        check_argument(
            isinstance(drop_unconnected, bool), "drop_unconnected", "True or False", drop_unconnected
        )
        self.grid = grid
        shape = grid.shape
        self.active = _image_field(active, shape, "active", bool, default=True)
        self.dirichlet = _image_field(dirichlet, shape, "dirichlet", bool, default=False) & self.active
        self.dirichlet_values = _image_field(
            dirichlet_values, shape, "dirichlet_values", np.float64, default=0.0
        )
        self.sources = _image_field(sources, shape, "sources", np.float64, default=0.0)
        _require_finite(self.dirichlet_values, self.dirichlet, "dirichlet_values")
        _require_finite(self.sources, self.active, "sources")
        if not self.dirichlet.any():
            raise ProblemError(
                "the problem has no active Dirichlet node, so the pressure is only defined up to a constant: "
                "fix the head somewhere (dirichlet mask), and check that the fixed nodes are active"
            )
        self.dropped = self._unconnected_nodes()
        if self.dropped.any():
            if not drop_unconnected:
                raise DisconnectedRegionError(self._describe_unconnected())
            self.active = self.active & ~self.dropped
        if not (self.active & ~self.dirichlet).any():
            raise ProblemError(
                f"the problem has no free node: every active node of the {'x'.join(map(str, shape))} grid has a "
                "fixed head, so there is nothing to solve (a fracture map needs a column between its inlet and "
                "outlet columns)"
            )
        # The conductivity form its system is built for (see variant), and the other forms' variants made so far.
        # Not a dict holding the problem itself: that cycle left every dropped problem, and the factors engines
        # keep for it, to the cyclic garbage collector, which large arrays hardly ever trigger (a training run on
        # more fractures than its problem cache holds grew by about 170 MB an epoch).
        self.form = "scalar"
        self._variants: dict[str, DarcyProblem] = {}

    @classmethod
    def fracture(
        cls,
        shape: tuple[int, ...],
        inlet: float = 2.0,
        outlet: float = 1.0,
        active: np.ndarray | None = None,
        pixel_size: float = 1e-4,
        thickness: float = 0.01,
        drop_unconnected: bool = False,
    ) -> DarcyProblem:
        """The original fracture setup: flow along x, head ``inlet`` on column 0 and ``outlet`` on the last
        column (corners included), no-flow elsewhere on the boundary, no sources.

        ``shape`` is the image shape (H, W), or (D, H, W) for a volume; the grid spans
        ``[0, W*pixel_size] x [0, H*pixel_size] (x [0, D*pixel_size])`` metres with one node per pixel and, in
        2D, out-of-plane ``thickness`` (metres). The nodes are then W/(W-1) pixels apart along x and H/(H-1) along
        y, so a non-square map's flow rate differs from that of square voxels by (H/(H-1))·((W-1)/W): 1 for a
        square map, 1.0004 for the original 256 x 260.
        """
        for name, head in (("inlet", inlet), ("outlet", outlet)):
            check_argument(is_real(head), f"{name} head", "a finite number (metres)", head)
        grid = Grid.from_image(shape, spacing=pixel_size, thickness=thickness)
        dirichlet = np.zeros(shape, dtype=bool)
        dirichlet[..., 0] = dirichlet[..., -1] = True
        values = np.zeros(shape)
        values[..., 0], values[..., -1] = inlet, outlet
        problem = cls(grid, dirichlet, values, active=active, drop_unconnected=drop_unconnected)
        problem._require_flow_path()
        return problem

    @cached_property
    def free(self) -> np.ndarray:
        """bool array, image layout: the nodes whose head is solved for."""
        return self.active & ~self.dirichlet

    @cached_property
    def layout(self) -> SystemLayout:
        """Sparsity pattern and index maps of the linear system, built once per problem."""
        return SystemLayout(self.grid, self.dirichlet, self.active, self.form)

    def variant(self, form: str) -> DarcyProblem:
        """The same problem with its system built for conductivity ``form`` (``scalar``, ``axes`` or ``edges``; see
        :mod:`flowlearn.darcy.conductivity`), made once and kept with this one. Engines keep their analyses and
        factors per problem object, so each form's pattern gets its own."""
        if form == self.form:
            return self
        if form not in self._variants:
            other = copy.copy(self)
            other.__dict__.pop("layout", None)
            other.form, other._variants = form, {}
            self._variants[form] = other
        return self._variants[form]

    def _require_flow_path(self) -> None:
        """Raise :class:`ProblemError` when no active path joins the inlet face (index 0 along x) to the outlet face:
        nothing would flow, and every pressure would be one of the two heads. Names the inactive pixels that close
        off the region reached from the inlet."""
        grid = self.grid
        labels = self._active_regions
        inlet, outlet = (np.unique(labels[..., i][labels[..., i] > 0]) for i in (0, -1))
        if np.intersect1d(inlet, outlet).size:
            return
        reached = np.isin(labels, inlet)
        # The inactive pixels next to the inlet's region (face neighbours, as the grid's edges): the barrier.
        blocking = np.argwhere(ndimage.binary_dilation(reached) & ~self.active)
        axes = ("depth", "row", "col")[-grid.dim :]
        lo, hi = blocking.min(axis=0), blocking.max(axis=0)
        box = ", ".join(f"{name}s {lo[i]}-{hi[i]}" for i, name in enumerate(axes))
        raise ProblemError(
            f"no active path joins the inlet (column 0) to the outlet (column {grid.shape[-1] - 1}): the region "
            f"reached from the inlet ends at column {int(np.argwhere(reached)[:, -1].max())}, closed off by "
            f"{len(blocking)} inactive pixel(s) (zero aperture or masked) within {box}, the first at "
            f"{tuple(int(i) for i in blocking[0])}; nothing would flow"
        )

    @cached_property
    def _active_regions(self) -> np.ndarray:
        """int32 labels, image layout: the connected regions of the nodes active as given (before unconnected ones
        are dropped), 1, 2, ...; 0 at inactive nodes. The grid's edges join face neighbours, the connectivity
        ``ndimage.label`` uses by default. Computed once: the checks of connectivity all read them."""
        labels, _ = ndimage.label(self.active)
        return labels

    def _unconnected_nodes(self) -> np.ndarray:
        """bool array, image layout: active nodes in a region that contains no Dirichlet node."""
        labels = self._active_regions
        return self.active & ~np.isin(labels, np.unique(labels[self.dirichlet]))

    def _describe_unconnected(self) -> str:
        grid = self.grid
        labels = self._active_regions
        region_labels, sizes = np.unique(labels[self.dropped], return_counts=True)
        lines = []
        axes = ("depth", "row", "col")[-grid.dim :]
        for label, size in list(zip(region_labels, sizes))[:_MAX_LISTED_REGIONS]:
            pixels = np.argwhere(labels == label)
            lo, hi = pixels.min(axis=0), pixels.max(axis=0)
            box = ", ".join(f"{name}s {lo[i]}-{hi[i]}" for i, name in enumerate(axes))
            first = ", ".join(f"{name} {pixels[0][i]}" for i, name in enumerate(axes))
            lines.append(f"  {size} node(s) at ({first}), within {box}")
        more = len(region_labels) - _MAX_LISTED_REGIONS
        if more > 0:
            lines.append(f"  ... and {more} more region(s)")
        return (
            f"{len(region_labels)} active region(s) ({int(sizes.sum())} node(s) in all) have no path to any "
            f"Dirichlet node, so their pressure is undefined:\n" + "\n".join(lines) + "\n"
            "Mark them inactive, or pass drop_unconnected=True to drop them."
        )


def _image_field(value, shape: tuple[int, ...], name: str, dtype, default) -> np.ndarray:
    """``value`` as an array of ``shape`` and ``dtype`` (bool or float64): ``default`` where None, a scalar
    broadcast; :class:`ProblemError` for another shape, or values that are not booleans (for a mask) or real
    numbers (for heads and sources)."""
    if value is None:
        return np.full(shape, default, dtype=dtype)
    array = np.asarray(value)
    # A string converts to float ("2"), or fails in numpy's words ("could not convert string to float").
    if dtype is not bool and array.dtype.kind not in "iuf":
        got = shown(value) if array.ndim == 0 else f"dtype {array.dtype}"
        raise ProblemError(f"{name} must be real numbers, got {got}")
    if array.ndim == 0:
        return np.full(shape, array, dtype=dtype)
    if array.shape != tuple(shape):
        raise ProblemError(f"{name} has shape {array.shape}, but the grid's image shape is {tuple(shape)}")
    if dtype is bool and array.dtype != bool:
        raise ProblemError(f"{name} must be a boolean mask, got dtype {array.dtype}")
    return np.array(array, dtype=dtype)


def _require_finite(values: np.ndarray, where: np.ndarray, name: str) -> None:
    fault = nonfinite(values, where)
    if fault:
        raise ProblemError(f"{name} has {fault}")
