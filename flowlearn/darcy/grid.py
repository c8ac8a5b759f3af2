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
each node first its +x neighbour, then +y, then +z.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import torch

from flowlearn.errors import ProblemError

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)


@dataclass(frozen=True, eq=False)
class Grid:
    """A regular grid of ``prod(ns)`` nodes.

    Args:
        mins: Lower corner, DPFEHM order ``(x, y)`` or ``(x, y, z)``, metres.
        maxs: Upper corner, same order, metres.
        ns: Node counts, DPFEHM order ``(nx, ny)`` or ``(nx, ny, nz)``; each at least 1 and at least 2 along any
            axis with ``max > min``.
        thickness: Out-of-plane thickness dz of a 2D grid, metres (ignored in 3D).
    """

    mins: tuple[float, ...]
    maxs: tuple[float, ...]
    ns: tuple[int, ...]
    thickness: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mins", tuple(float(v) for v in self.mins))
        object.__setattr__(self, "maxs", tuple(float(v) for v in self.maxs))
        object.__setattr__(self, "ns", tuple(int(v) for v in self.ns))
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
            if not (np.isfinite(lo) and np.isfinite(hi)) or hi < lo or (n > 1 and hi == lo):
                raise ProblemError(
                    f"grid axis {'xyz'[axis]}: need min < max, got min={lo}, max={hi} for {n} nodes"
                )
        if not np.isfinite(self.thickness) or self.thickness <= 0:
            raise ProblemError(f"grid thickness must be positive and finite, got {self.thickness}")

    @classmethod
    def from_image(cls, shape: tuple[int, ...], spacing: float = 1.0, thickness: float = 1.0) -> Grid:
        """The grid of an image of ``shape`` (H, W) or (D, H, W) with pixel size ``spacing``.

        Following the original fracture setup, the domain spans ``[0, W*spacing] x [0, H*spacing]`` (and
        ``D*spacing`` in z) with one node per pixel, so the node spacing is ``W*spacing/(W-1)`` along x.
        """
        ns = tuple(reversed(shape))
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

    @cached_property
    def _edge_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        index = np.arange(self.num_nodes).reshape(self.ns)  # index[ix, iy(, iz)] = node
        spacing = self.spacing
        depth = self.thickness if self.dim == 2 else None
        candidates, aols = [], []
        for axis in range(self.dim):
            # Area of the face normal to `axis` divided by the distance between the two nodes.
            others = [spacing[a] for a in range(self.dim) if a != axis]
            area = float(np.prod(others)) * (depth if depth is not None else 1.0)
            aol = area / spacing[axis]
            shifted = np.full(self.ns, -1, dtype=np.int64)
            src = [slice(None)] * self.dim
            dst = [slice(None)] * self.dim
            src[axis], dst[axis] = slice(1, None), slice(None, -1)
            shifted[tuple(dst)] = index[tuple(src)]
            candidates.append(shifted.ravel())
            aols.append(np.full(self.num_nodes, aol))
        # Interleave per node (x, y[, z]) and keep existing neighbours: DPFEHM's edge order.
        neighbour = np.stack(candidates, axis=1).ravel()
        aol = np.stack(aols, axis=1).ravel()
        node = np.repeat(np.arange(self.num_nodes), self.dim)
        axis = np.tile(np.arange(self.dim), self.num_nodes)
        keep = neighbour >= 0
        return np.stack([node[keep], neighbour[keep]], axis=1), aol[keep], axis[keep]

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
        self._check_trailing(image.shape, self.shape, "image")
        lead = image.ndim - self.dim
        order = (*range(lead), *reversed(range(lead, image.ndim)))
        if isinstance(image, torch.Tensor):
            return image.permute(order).reshape(*image.shape[:lead], self.num_nodes)
        return np.transpose(image, order).reshape(*image.shape[:lead], self.num_nodes)

    def to_image(self, nodes: ArrayOrTensor) -> ArrayOrTensor:
        """Node order ``(..., num_nodes)`` -> image layout ``(..., *shape)`` (numpy array or torch tensor)."""
        self._check_trailing(nodes.shape, (self.num_nodes,), "node vector")
        lead = nodes.ndim - 1
        order = (*range(lead), *reversed(range(lead, lead + self.dim)))
        if isinstance(nodes, torch.Tensor):
            return nodes.reshape(*nodes.shape[:lead], *self.ns).permute(order)
        return np.transpose(nodes.reshape(*nodes.shape[:lead], *self.ns), order)

    @staticmethod
    def _check_trailing(shape: tuple[int, ...], expected: tuple[int, ...], what: str) -> None:
        if tuple(shape[len(shape) - len(expected) :]) != tuple(expected) or len(shape) < len(expected):
            raise ProblemError(f"{what} of shape {tuple(shape)} does not end in the grid's shape {expected}")
