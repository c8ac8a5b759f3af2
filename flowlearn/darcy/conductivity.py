"""The forms a node conductivity takes, and the edges of the system each form builds.

:func:`~flowlearn.darcy.solve.solve_pressure` tells the forms apart by the shape of its first argument (``B`` the
batch, ``shape`` the grid's image shape, ``dim`` its number of axes):

- ``scalar``: log K per node, ``shape`` or ``(B, *shape)``. Every edge conducts the geometric mean of its two
  nodes' values, ``T_e = aol_e · exp((logK_a + logK_b)/2)`` (DPFEHM's convention).
- ``axes``: log K per node and grid axis, ``(B, dim, *shape)``, channels in DPFEHM's axis order x, y[, z]: the
  diagonal of a transmissivity tensor. An edge along axis d conducts the geometric mean of its two nodes' values
  for axis d; equal channels are the scalar form.
- ``tensor`` (2D grids): ``(B, 3, H, W)`` = (log T_xx, log T_yy, ρ) with ρ = T_xy / √(T_xx·T_yy) in (-1, 1), the
  full symmetric tensor, solved by the 9-point scheme of :mod:`flowlearn.darcy.tensor`; ρ ≡ 0 is the axes form.

Inside the solve, a :class:`~flowlearn.darcy.assembly.SystemLayout` reads each edge's transmissibility from
*slots* of the flattened values (``(B, C, *shape)`` flattened in C order, so slot = channel·N + pixel):

- rule ``geometric`` (scalar and axes): ``T_e = aol_e · exp((v[slot_a] + v[slot_b]) / 2)``;
- rule ``linear`` (the ``edges`` form the tensor scheme hands the solve): ``T_e = v[slot_a]``, one value per
  candidate edge of the 9-point stencil, already a transmissibility (m³ for a fracture; ≥ 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowlearn.darcy.grid import Grid, axis_edges
from flowlearn.darcy.tensor import nine_point_edges
from flowlearn.errors import SolveInputError

# The forms a user's field may take, and the one the tensor form is solved in.
FORMS = ("scalar", "axes", "tensor")
EDGES = "edges"
# The channels of the tensor form.
TENSOR_CHANNELS = ("log T_xx", "log T_yy", "rho")


def form_of(shape: tuple[int, ...], grid_shape: tuple[int, ...]) -> str:
    """The form of a field of ``shape`` on a grid of image shape ``grid_shape``; :class:`SolveInputError` when it is
    none of them (the message lists the shapes each form takes)."""
    shape, dim = tuple(shape), len(grid_shape)
    if shape == tuple(grid_shape) or shape[1:] == tuple(grid_shape):
        return "scalar"
    if len(shape) == dim + 2 and shape[2:] == tuple(grid_shape):
        if shape[1] == dim:
            return "axes"
        if shape[1] == len(TENSOR_CHANNELS) and dim == 2:
            return "tensor"
    grid = ", ".join(map(str, grid_shape))
    tensor = f", or (batch, 3, {grid}) for a full 2D tensor (log T_xx, log T_yy, rho)" if dim == 2 else ""
    raise SolveInputError(
        f"log_k has shape {shape}, but the problem's grid needs ({grid}) or (batch, {grid}) for one conductivity "
        f"per node, (batch, {dim}, {grid}) for one per node and axis (x, y{', z' if dim == 3 else ''}){tensor}"
    )


@dataclass(frozen=True)
class CandidateEdges:
    """The edges a form may put in the system, before inactive and Dirichlet-Dirichlet edges are dropped.

    Attributes:
        pixels: int64 (E, 2), the two nodes of every edge as flat image indices.
        areas_over_lengths: float64 (E,), face area over node distance (1 where the values are transmissibilities).
        slots: int64 (E, 2), the entries of the flattened values each edge's transmissibility reads.
        num_values: the length of the flattened values of one sample.
        rule: ``"geometric"`` or ``"linear"`` (module docstring).
    """

    pixels: np.ndarray
    areas_over_lengths: np.ndarray
    slots: np.ndarray
    num_values: int
    rule: str


def candidate_edges(grid: Grid, form: str) -> CandidateEdges:
    """The candidate edges of ``form`` on ``grid``: the grid's axis edges for ``scalar`` and ``axes``, the 9-point
    stencil's axis and diagonal edges for ``edges`` (2D grids)."""
    if form == EDGES:
        if grid.dim != 2:
            raise SolveInputError(f"the full tensor form needs a 2D grid, got one of shape {grid.shape}")
        pixels = nine_point_edges(grid.shape)
        slots = np.repeat(np.arange(len(pixels))[:, None], 2, axis=1)
        return CandidateEdges(pixels, np.ones(len(pixels)), slots, len(pixels), "linear")
    pixels, counts = axis_edges(grid.shape)
    areas_over_lengths = np.repeat(grid.axis_areas_over_lengths, counts)
    if form == "scalar":
        return CandidateEdges(pixels, areas_over_lengths, pixels, grid.num_nodes, "geometric")
    if form == "axes":
        slots = pixels + grid.num_nodes * np.repeat(np.arange(grid.dim), counts)[:, None]
        return CandidateEdges(pixels, areas_over_lengths, slots, grid.dim * grid.num_nodes, "geometric")
    raise ValueError(f"unknown conductivity form {form!r}; the forms are {', '.join((*FORMS, EDGES))}")
