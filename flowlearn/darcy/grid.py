"""Regular 2D and 3D grids in the DPFEHM convention, and the image <-> node mapping.

The grid is vertex-centred: along each axis the nodes sit at ``linspace(min, max, n)``, so the spacing is
``(max - min) / (n - 1)``. Every node is a cell of the finite-volume scheme and there are no ghost cells; an outer
face without a neighbour is no-flow.

Two layouts name the same nodes:

* **image layout** -- an array of shape ``(H, W)`` (rows = y, columns = x) or ``(D, H, W)`` (z, y, x), the way
  aperture maps and LBM fields are stored;
* **node order** -- DPFEHM's linear index, in which y varies fastest in 2D (``node = c*H + r``) and z fastest,
  then y, then x, in 3D. This is the Fortran-order flattening of the image.

Edges are listed exactly as DPFEHM's ``regulargrid2d``/``regulargrid3d`` build them: nodes in node order, and at
each node first its +x neighbour, then +y, then +z. :func:`axis_edges` lists the same edges in image order, the
order the solve assembles its system in.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import torch

from flowlearn.checks import available_memory, is_real, shown
from flowlearn.errors import ProblemError

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)

# Peak memory of building a grid's edge table (edges, areas over lengths, axes), bytes per node and axis: the
# largest array a grid makes, measured with tracemalloc (170 bytes a node at 1000 x 1000, 250 at 100^3).
EDGE_TABLE_BYTES = 85


def check_argument(ok: bool, name: str, expected: str, value: object) -> None:
    """Raise :class:`ProblemError` ``"<name> must be <expected>, got <value>"`` unless ``ok``."""
    if not ok:
        raise ProblemError(f"{name} must be {expected}, got {shown(value)}")


def _sequence(value: object, integers: bool = False) -> bool:
    """Whether ``value`` is a tuple, list or 1-D array of finite real numbers (of integers, with ``integers``)."""
    kind = numbers.Integral if integers else numbers.Real
    return (
        isinstance(value, tuple | list | np.ndarray)
        and np.ndim(value) == 1
        and all(isinstance(v, kind) and is_real(v) for v in value)
    )


@dataclass(frozen=True, eq=False)
class Grid:
    """A regular grid of ``prod(ns)`` nodes.

    Args:
        mins: Lower corner, DPFEHM order ``(x, y)`` or ``(x, y, z)``, metres.
        maxs: Upper corner, same order, metres.
        ns: Node counts, DPFEHM order ``(nx, ny)`` or ``(nx, ny, nz)``; integers, each at least 1 and at least 2
            along any axis with ``max > min``.
        thickness: Out-of-plane thickness dz of a 2D grid, metres, > 0 (ignored in 3D).

    Raises:
        ProblemError: an argument of the wrong type or out of its range (naming it), or a grid whose edges need
            more memory than this process has available (before anything is allocated).
    """

    mins: tuple[float, ...]
    maxs: tuple[float, ...]
    ns: tuple[int, ...]
    thickness: float = 1.0

    def __post_init__(self) -> None:
        # Types first: int(2.7) would truncate a node count, and float("x") or a scalar fail in numpy's words.
        check_argument(
            _sequence(self.mins), "grid corner mins", "a tuple of finite numbers (x, y[, z])", self.mins
        )
        check_argument(
            _sequence(self.maxs), "grid corner maxs", "a tuple of finite numbers (x, y[, z])", self.maxs
        )
        check_argument(
            _sequence(self.ns, integers=True),
            "grid node counts ns",
            "a tuple of integers (nx, ny[, nz])",
            self.ns,
        )
        check_argument(
            is_real(self.thickness) and self.thickness > 0,
            "grid thickness",
            "a finite number > 0 (metres)",
            self.thickness,
        )
        object.__setattr__(self, "mins", tuple(float(v) for v in self.mins))
        object.__setattr__(self, "maxs", tuple(float(v) for v in self.maxs))
        object.__setattr__(self, "ns", tuple(int(v) for v in self.ns))
        object.__setattr__(self, "thickness", float(self.thickness))
        dim = len(self.ns)
        if dim not in (2, 3) or len(self.mins) != dim or len(self.maxs) != dim:
            raise ProblemError(
                f"a grid needs 2 or 3 axes with matching mins, maxs and ns; got mins={self.mins}, "
                f"maxs={self.maxs}, ns={self.ns}"
            )
        if any(n < 1 for n in self.ns):
            raise ProblemError(
                f"the grid is empty: node counts ns={self.ns} (DPFEHM order x, y[, z]) must be >= 1"
            )
        for axis, (lo, hi, n) in enumerate(zip(self.mins, self.maxs, self.ns)):
            if hi < lo or (n > 1 and hi == lo):
                raise ProblemError(
                    f"grid axis {'xyz'[axis]}: need min < max, got min={lo}, max={hi} for {n} nodes"
                )
        # Refused before anything is allocated: numpy would fail in the middle of the edge table (a MemoryError
        # for terabytes), or swap the machine to a halt for a little more than it has.
        nodes = math.prod(self.ns)
        needed, memory = EDGE_TABLE_BYTES * dim * nodes, available_memory()
        if needed > memory:
            raise ProblemError(
                f"a grid of {nodes:.3g} nodes (ns={self.ns}) needs about {needed / 2**30:.3g} GiB for its edges, "
                f"more than the {memory / 2**30:.3g} GiB available"
            )

    @classmethod
    def from_image(cls, shape: tuple[int, ...], spacing: float = 1.0, thickness: float = 1.0) -> Grid:
        """The grid of an image of ``shape`` (H, W) or (D, H, W) with pixel size ``spacing`` (metres, > 0).

        Following the original fracture setup, the domain spans ``[0, W*spacing] x [0, H*spacing]`` (and
        ``D*spacing`` in z) with one node per pixel, so the node spacing is ``W*spacing/(W-1)`` along x.
        """
        check_argument(
            _sequence(shape, integers=True), "image shape", "a tuple of integers (H, W) or (D, H, W)", shape
        )
        # A string would repeat (8 * "x"), a negative or zero one give a grid without extent.
        check_argument(
            is_real(spacing) and spacing > 0, "pixel size", "a finite number > 0 (metres)", spacing
        )
        ns = tuple(reversed(tuple(shape)))
        return cls(mins=(0.0,) * len(ns), maxs=tuple(n * spacing for n in ns), ns=ns, thickness=thickness)

    @property
    def dim(self) -> int:
        return len(self.ns)

    @property
    def shape(self) -> tuple[int, ...]:
        """Image shape: (H, W) = (ny, nx) in 2D, (D, H, W) = (nz, ny, nx) in 3D."""
        return tuple(reversed(self.ns))

    @property
    def num_nodes(self) -> int:
        return int(np.prod(self.ns))

    @property
    def spacing(self) -> tuple[float, ...]:
        """Node spacing (dx, dy[, dz]) in metres; an axis with one node gets spacing 1 (it has no edges)."""
        return tuple(
            (hi - lo) / (n - 1) if n > 1 else 1.0 for lo, hi, n in zip(self.mins, self.maxs, self.ns)
        )

    @cached_property
    def coords(self) -> np.ndarray:
        """Node coordinates, float64 array (dim, num_nodes), node order, metres."""
        axes = [np.linspace(lo, hi, n) for lo, hi, n in zip(self.mins, self.maxs, self.ns)]
        # indexing="ij" over (x, y[, z]) with C-order ravel makes the last axis (y or z) vary fastest.
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh])

    @cached_property
    def volumes(self) -> np.ndarray:
        """Control volume of each node, float64 (num_nodes,), m^3 (``dx*dy*thickness`` in 2D)."""
        cell = float(np.prod(self.spacing)) * (self.thickness if self.dim == 2 else 1.0)
        return np.full(self.num_nodes, cell)

    @property
    def axis_areas_over_lengths(self) -> tuple[float, ...]:
        """Face area over node distance of an edge along each axis, DPFEHM order (x, y[, z]), metres: the area of
        the face normal to the axis (dy*dz, ...; dz the thickness in 2D) over the spacing along it."""
        spacing = self.spacing
        depth = self.thickness if self.dim == 2 else 1.0
        return tuple(
            math.prod(spacing[other] for other in range(self.dim) if other != axis) * depth / spacing[axis]
            for axis in range(self.dim)
        )

    @cached_property
    def _edge_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pixels, counts = axis_edges(self.shape)
        node_of_pixel = self.to_image(np.arange(self.num_nodes)).reshape(-1)
        # Each pair's lower pixel is its lower node too; DPFEHM's order is by node, then axis (x, y, z).
        nodes = node_of_pixel[pixels]
        axes = np.repeat(np.arange(self.dim), counts)
        order = np.lexsort((axes, nodes[:, 0]))
        return nodes[order], np.repeat(self.axis_areas_over_lengths, counts)[order], axes[order]

    @property
    def edges(self) -> np.ndarray:
        """Neighbour pairs, int64 array (num_edges, 2) of 0-based node indices, in DPFEHM's order."""
        return self._edge_table[0]

    @property
    def areas_over_lengths(self) -> np.ndarray:
        """Face area over node distance of each edge, float64 (num_edges,), metres."""
        return self._edge_table[1]

    @property
    def edge_axes(self) -> np.ndarray:
        """The axis each edge runs along, int64 (num_edges,): 0 for x, 1 for y, 2 for z (DPFEHM's axis order)."""
        return self._edge_table[2]

    def to_nodes(self, image: ArrayOrTensor) -> ArrayOrTensor:
        """Image layout ``(..., *shape)`` -> node order ``(..., num_nodes)`` (numpy array or torch tensor)."""
        self._check_trailing(image, self.shape, "image")
        lead = image.ndim - self.dim
        order = (*range(lead), *reversed(range(lead, image.ndim)))
        if isinstance(image, torch.Tensor):
            return image.permute(order).reshape(*image.shape[:lead], self.num_nodes)
        return np.transpose(image, order).reshape(*image.shape[:lead], self.num_nodes)

    def to_image(self, nodes: ArrayOrTensor) -> ArrayOrTensor:
        """Node order ``(..., num_nodes)`` -> image layout ``(..., *shape)`` (numpy array or torch tensor)."""
        self._check_trailing(nodes, (self.num_nodes,), "node vector")
        lead = nodes.ndim - 1
        order = (*range(lead), *reversed(range(lead, lead + self.dim)))
        if isinstance(nodes, torch.Tensor):
            return nodes.reshape(*nodes.shape[:lead], *self.ns).permute(order)
        return np.transpose(nodes.reshape(*nodes.shape[:lead], *self.ns), order)

    @staticmethod
    def _check_trailing(array: np.ndarray | torch.Tensor, expected: tuple[int, ...], what: str) -> None:
        """Raise :class:`ProblemError` unless ``array`` is an array or tensor whose shape ends in ``expected``."""
        if not isinstance(array, np.ndarray | torch.Tensor):
            raise ProblemError(f"{what} must be a numpy array or torch tensor, got {type(array).__name__}")
        shape = array.shape
        if tuple(shape[len(shape) - len(expected) :]) != tuple(expected) or len(shape) < len(expected):
            raise ProblemError(f"{what} of shape {tuple(shape)} does not end in the grid's shape {expected}")


def axis_edges(shape: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """The edges between neighbouring pixels of an image of ``shape`` (H, W) or (D, H, W), in image order: int64
    (E, 2) flat image indices, the lower first, the x-edges first, then the y-edges (then the z-edges), each axis's
    pairs in increasing order; and how many edges run along each axis (x, y[, z]).

    The image order the solve's layout sorts its edges into, which this order reaches by merging sorted runs."""
    index = np.arange(math.prod(shape)).reshape(shape)
    counts = tuple(index.size - index.size // n for n in reversed(shape))
    edges = np.empty((sum(counts), 2), dtype=np.int64)
    start = 0
    for count, image_axis in zip(counts, reversed(range(len(shape)))):  # x is the image's last axis
        lower = index[(slice(None),) * image_axis + (slice(0, -1),)]
        block = edges[start : start + count]
        np.copyto(block[:, 0].reshape(lower.shape), lower)
        np.add(block[:, 0], math.prod(shape[image_axis + 1 :]), out=block[:, 1])
        start += count
    return edges, counts
