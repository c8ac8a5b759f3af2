"""A finite-volume mesh that follows a fracture's smooth walls, for the Stokes solve of :mod:`flowlearn.reference.stokes`.

The voxel mesh puts the walls on a staircase, whose Stokes flow converges erratically as the voxels shrink. This one
is structured and wall-fitted: the map's columns (r x r per voxel, ``cells_per_voxel``) keep vertical sides, and
each column's gap between the bottom wall b(x, y) and the top wall t(x, y) is split into the same number of layers,

    z_k = b + (t - b) k / n,    k = 0 .. n,

with the walls evaluated exactly at the columns' corners (:func:`wall_corners`: Fourier series of periodic walls,
of the larger walls a map is a window of (:class:`Window`), planes as planes). Between corners the
walls are bilinear, so the meshed gap converges to the smooth one at second order in the cell size, and each
refinement is a systematic subdivision of the last: what Richardson extrapolation needs.

The reservoirs before the inlet and after the outlet are open over the whole depth [z_low, z_high], as in the LBM's
box. Their columns carry three stacks of layers, below the bottom wall's height at the map's end face, across the
gap and above the top wall's, so that the gap's layers meet the fracture's first and last columns face to face; the
stacks above and below end on the solid's faces, which are walls.

Contacts: a map column is meshed only where the gap is open (t - b above ``MIN_APERTURE`` of the mean aperture) at
all four of its corners, and only if a path of shared faces joins it to a reservoir. Near a contact the gap closes
linearly, and the flux through the columns left out falls as the cube of their aperture: the error this leaves
vanishes faster than the cells' size.

Coordinates: x along the flow (the map's axis 1), y across it (axis 0), z the depth, in the walls' voxels. Cells are
numbered in the C order of their (y, x, z) indices, so that every internal face's owner is the cell on its lower
side, as OpenFOAM's upper-triangular face order wants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from flowlearn.errors import ProblemError
from flowlearn.fractures.roughness import refine_wall
from flowlearn.reference.voxels import joined_to_ends

# A map column's corners must be open by more than this fraction of the mean aperture for the column to be meshed:
# it keeps cells from collapsing to zero height at a contact's rim. At 1e-3 the rim's cells were a thousandth of
# the gap thick, and the solves of the rock recipe's walls at 3 cells per voxel diverged after reaching 2e-6 (at
# relaxation 0.9, 0.7 and 0.5); at 0.05 they converge. The rim left out carries at most 0.05³ of a mean gap's flux
# per unit width: the flow rate changed by -0.16 % at 1 cell per voxel, +0.04 % at 2.
MIN_APERTURE = 0.05
# The reservoirs reach this far (voxels) below the lowest and above the highest wall, so that no reservoir cell is
# flat.
RESERVOIR_MARGIN = 0.5
# Boundary patches, in the order their faces are written; ``stokes.write_dictionaries`` sets their conditions.
PATCHES = ("inlet", "outlet", "symmetryLow", "symmetryHigh", "walls")


@dataclass(frozen=True)
class WallMesh:
    """A wall-fitted hexahedral mesh in OpenFOAM's polyMesh form.

    Attributes:
        points: float64 (P, 3), x y z in the walls' voxels.
        faces: int64 (F, 4), point labels of each quadrilateral, ordered so that its normal points out of its owner.
        owner: int64 (F,), the cell on each face's inner side.
        neighbour: int64 (I,), the cell on the other side of the first I (internal) faces.
        patches: each boundary patch's (first face, face count), in :data:`PATCHES` order.
        cells: bool (NY, NX, NZ), which (y, x, z) cells of the structured block are meshed; r x r columns per
            voxel of the walls.
        layers: (below, gap, above), the layers of each stack; a map column's cells are the ``gap`` ones.
        reservoir: columns of each reservoir (NX is the map's columns plus two reservoirs).
        thickness: float64 (NY, NX), each column's gap thickness (t - b, the mean over its four corners), voxels: a
            gap cell's height times ``layers[1]``, and its volume times ``layers[1]`` r².
    """

    points: np.ndarray
    faces: np.ndarray
    owner: np.ndarray
    neighbour: np.ndarray
    patches: dict[str, tuple[int, int]]
    cells: np.ndarray
    layers: tuple[int, int, int]
    reservoir: int
    thickness: np.ndarray

    def map_cells(self) -> np.ndarray:
        """bool (NY, NX - 2 reservoir, gap layers): the meshed cells of the map's columns."""
        below, gap, _ = self.layers
        return self.cells[:, self.reservoir : self.cells.shape[1] - self.reservoir, below : below + gap]

    def map_thickness(self) -> np.ndarray:
        """float64 (NY, NX - 2 reservoir): the gap thickness of the map's columns."""
        return self.thickness[:, self.reservoir : self.thickness.shape[1] - self.reservoir]

    def cell_labels(self) -> np.ndarray:
        """int64 (NY, NX, NZ): each meshed cell's label, -1 where none."""
        labels = np.full(self.cells.shape, -1, dtype=np.int64)
        labels[self.cells] = np.arange(int(self.cells.sum()))
        return labels


@dataclass(frozen=True)
class Window:
    """Where a map's walls are a window of larger periodic walls (the ``rock`` recipe's): ``larger``, the larger
    walls (bottom, top), float64 (H', W') each, heights in voxels; ``origin``, the (row, column) of the map's first
    pixel in them. A window is not periodic: only the larger walls' Fourier series evaluates it between pixels."""

    larger: tuple[np.ndarray, np.ndarray]
    origin: tuple[int, int]


# Walls whose heights a least-squares plane leaves by less than this (voxels) are planes (the exact cases): their
# corners are the plane's, where the Fourier series of a tilted plane, which is not periodic, would ring.
PLANE_TOLERANCE = 1e-9


def wall_corners(
    wall: np.ndarray, factor: int, larger: np.ndarray | None = None, origin: tuple[int, int] = (0, 0)
) -> np.ndarray:
    """A wall (float (H, W), heights at the pixels' centres, in pixels) at the corners of the pixels of a grid
    ``factor`` times finer: float64 (factor H + 1, factor W + 1), heights in the finer pixels.

    Fine pixel c of :func:`~flowlearn.fractures.roughness.refine` sits at c / factor coarse pixels; its corners at
    (c -+ 1/2) / factor. A plane is evaluated there as a plane. Other walls are periodic Fourier series
    (:func:`~flowlearn.fractures.roughness.refine_wall`): the map's own, or, where the map is a window at ``origin``
    of the ``larger`` wall (float (H', W'), pixels), the larger wall's. The series is evaluated on the grid 2
    ``factor`` times finer, whose samples alternate between the fine pixels' centres and their corners.
    """
    height, width = wall.shape
    fine = np.arange(factor * height + 1), np.arange(factor * width + 1)
    if larger is None:
        plane = _plane(wall)
        if plane is not None:
            slope_y, slope_x, level = plane
            y, x = ((2 * n - 1) / (2 * factor) for n in fine)
            return factor * (level + slope_y * y[:, None] + slope_x * x[None, :])
    source = wall if larger is None else larger
    doubled = refine_wall(source, 2 * factor) / 2
    rows = (2 * factor * origin[0] + 2 * fine[0] - 1) % doubled.shape[0]
    columns = (2 * factor * origin[1] + 2 * fine[1] - 1) % doubled.shape[1]
    return doubled[np.ix_(rows, columns)]


def _plane(wall: np.ndarray) -> tuple[float, float, float] | None:
    """(slope along rows, slope along columns, height at pixel (0, 0)) of a wall that is a plane, else None."""
    rows, columns = np.indices(wall.shape)
    design = np.stack([rows.ravel(), columns.ravel(), np.ones(wall.size)], axis=1).astype(np.float64)
    coefficients, *_ = np.linalg.lstsq(design, wall.ravel().astype(np.float64), rcond=None)
    if np.abs(design @ coefficients - wall.ravel()).max() > PLANE_TOLERANCE:
        return None
    return float(coefficients[0]), float(coefficients[1]), float(coefficients[2])


def wall_mesh(
    bottom: np.ndarray, top: np.ndarray, cells_per_voxel: int, reservoir: int, window: Window | None = None
) -> WallMesh:
    """The wall-fitted mesh of the gap between ``bottom`` and ``top`` (float (H, W) heights at the map's pixel
    centres, in voxels; periodic Fourier walls, planes, or a ``window`` of larger walls, as the generator draws
    them), ``cells_per_voxel`` cells along each voxel, and ``reservoir`` voxels of open reservoir before and after
    the map. It is built in the fine cells' units and scaled to the walls' voxels.

    Raises:
        ProblemError: no open path joins the inlet to the outlet.
    """
    r = cells_per_voxel
    bottom_corner, top_corner = corners(bottom, top, r, window)  # fine voxels
    columns, mean_gap = open_columns(bottom_corner, top_corner)
    # Positions (fine voxels) reached below and above by either wall, corners and centres alike: where the walls
    # cross (a window's contacts), the bottom wall may rise above the top wall's highest point.
    lowest = min(bottom_corner.min(), top_corner.min(), r * bottom.min(), r * top.min())
    highest = max(bottom_corner.max(), top_corner.max(), r * bottom.max(), r * top.max())
    z_low, z_high = lowest - r * RESERVOIR_MARGIN, highest + r * RESERVOIR_MARGIN

    n_res = r * reservoir
    height, width = columns.shape
    # Corner columns of the block: the inlet reservoir's take the map's first corners, the outlet's its last.
    first, last = bottom_corner[:, :1], bottom_corner[:, -1:]
    b = np.concatenate([np.repeat(first, n_res, 1), bottom_corner, np.repeat(last, n_res, 1)], axis=1)
    first, last = top_corner[:, :1], top_corner[:, -1:]
    t = np.concatenate([np.repeat(first, n_res, 1), top_corner, np.repeat(last, n_res, 1)], axis=1)
    # Where a reservoir's face meets a contact, no map cell uses the corner: open the reservoir's gap layers there,
    # so that its cells keep a height.
    reservoir_corner = np.zeros(b.shape, bool)
    reservoir_corner[:, : n_res + 1] = reservoir_corner[:, b.shape[1] - n_res - 1 :] = True
    closed = reservoir_corner & (t - b <= MIN_APERTURE * mean_gap)
    t = np.where(closed, b + np.minimum(mean_gap, 0.5 * (z_high - b)), t)

    gap_layers = max(2, round(mean_gap))
    # The reservoirs' fluid above and below the gap barely moves: layers twice the gap's height.
    below = max(1, math.ceil(float((b[:, 0] - z_low).mean()) * gap_layers / (2 * mean_gap)))
    above = max(1, math.ceil(float((z_high - t[:, 0]).mean()) * gap_layers / (2 * mean_gap)))
    fractions = [np.linspace(0, 1, n + 1)[1:] for n in (below, gap_layers, above)]
    z = np.concatenate(
        [
            z_low + (b - z_low)[..., None] * np.concatenate([[0.0], fractions[0]]),
            b[..., None] + (t - b)[..., None] * fractions[1],
            t[..., None] + (z_high - t)[..., None] * fractions[2],
        ],
        axis=-1,
    )  # (NY + 1, NX + 1, NZ + 1)
    layers = below + gap_layers + above
    cells = np.zeros((height, width + 2 * n_res, layers), bool)
    cells[:, :n_res] = cells[:, width + n_res :] = True
    cells[:, n_res : n_res + width, below : below + gap_layers] = columns[..., None]

    ny, nx, nz = (n + 1 for n in cells.shape)
    points = np.stack(
        np.broadcast_arrays(
            np.arange(nx, dtype=float)[None, :, None], np.arange(ny, dtype=float)[:, None, None], z
        ),
        axis=-1,
    ).reshape(-1, 3)
    point_labels = np.arange(ny * nx * nz).reshape(ny, nx, nz)
    faces, owner, neighbour, patches = _faces(cells, point_labels)
    used, compact = np.unique(faces, return_inverse=True)
    corner_thickness = t - b
    thickness = 0.25 * (
        corner_thickness[:-1, :-1]
        + corner_thickness[1:, :-1]
        + corner_thickness[:-1, 1:]
        + corner_thickness[1:, 1:]
    )
    return WallMesh(
        points=points[used] / r,
        faces=compact.reshape(faces.shape),
        owner=owner,
        neighbour=neighbour,
        patches=patches,
        cells=cells,
        layers=(below, gap_layers, above),
        reservoir=n_res,
        thickness=thickness / r,
    )


def corners(
    bottom: np.ndarray, top: np.ndarray, factor: int, window: Window | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Both walls at the corners of the grid ``factor`` times finer (:func:`wall_corners`), from the ``window``'s
    larger walls where the map is one."""
    if window is None:
        return wall_corners(bottom, factor), wall_corners(top, factor)
    return tuple(
        wall_corners(wall, factor, larger, window.origin)
        for wall, larger in zip((bottom, top), window.larger)
    )


def open_columns(bottom_corner: np.ndarray, top_corner: np.ndarray) -> tuple[np.ndarray, float]:
    """The map columns to mesh, bool (NY, NX), for walls at their corners (float (NY + 1, NX + 1)): open at all four
    corners, and joined to a reservoir; and the mean gap (contacts counting 0), in the corners' units.

    Raises:
        ProblemError: the walls touch everywhere, or no open path joins the inlet to the outlet.
    """
    gap = top_corner - bottom_corner
    mean_gap = float(np.maximum(gap, 0).mean())
    if mean_gap <= 0:
        raise ProblemError("the walls touch everywhere: no gap to mesh")
    open_corner = gap > MIN_APERTURE * mean_gap
    columns = open_corner[:-1, :-1] & open_corner[1:, :-1] & open_corner[:-1, 1:] & open_corner[1:, 1:]
    return _joined_to_reservoirs(columns), mean_gap


def _joined_to_reservoirs(columns: np.ndarray) -> np.ndarray:
    """The open map columns (bool (H, W)) that a path of shared faces joins to the first or last column, which the
    reservoirs open onto; pockets cut off by contacts would make the pressure equation singular."""
    labels, _ = ndimage.label(columns)
    if not np.intersect1d(labels[:, 0], labels[:, -1]).any():
        raise ProblemError("no open path joins the inlet column to the outlet column; nothing would flow")
    return joined_to_ends(labels)


# The four corners of a face across each axis of the (y, x, z) block, as offsets from the face's lowest corner,
# ordered so that the face's normal points along the axis (right-hand rule).
_QUADS = {
    0: ((0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0)),  # y faces: z then x, z × x = +y
    1: ((0, 0, 0), (1, 0, 0), (1, 0, 1), (0, 0, 1)),  # x faces: y then z, y × z = +x
    2: ((0, 0, 0), (0, 1, 0), (1, 1, 0), (1, 0, 0)),  # z faces: x then y, x × y = +z
}
# The patch of the block's two end faces across each axis; every other boundary face is a wall.
_ENDS = {0: ("symmetryLow", "symmetryHigh"), 1: ("inlet", "outlet"), 2: ("walls", "walls")}


def _faces(
    cells: np.ndarray, point_labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, tuple[int, int]]]:
    """The faces of the meshed ``cells`` (bool (NY, NX, NZ)): point labels (F, 4), owners (F,), neighbours (I,) of
    the first I faces, and each patch's (start, count); internal faces sorted by owner, then neighbour."""
    labels = np.full(cells.shape, -1, dtype=np.int64)
    labels[cells] = np.arange(int(cells.sum()))
    internal: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    boundary: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in PATCHES}
    for axis, quad in _QUADS.items():
        pad = [(0, 0)] * 3
        pad[axis] = (1, 1)
        padded = np.pad(labels, pad, constant_values=-1)
        count = cells.shape[axis] + 1  # faces across this axis, per line of cells
        low = np.take(padded, np.arange(count), axis=axis)
        high = np.take(padded, np.arange(1, count + 1), axis=axis)
        # The face whose lowest corner has block index (i, j, k): its points.
        base = [slice(0, n) for n in cells.shape]
        base[axis] = slice(0, count)
        corners = np.stack(
            [
                point_labels[tuple(slice(s.start + d, s.stop + d) for s, d in zip(base, offset))]
                for offset in quad
            ],
            axis=-1,
        )
        index = np.indices(low.shape)[axis]
        both = (low >= 0) & (high >= 0)
        internal.append((corners[both], low[both], high[both]))
        for side, owners in enumerate((low, high)):
            one = (owners >= 0) & ((high < 0) if side == 0 else (low < 0))
            quads = corners[one][:, ::-1] if side else corners[one]  # a high-side owner faces the other way
            end = index[one] == (count - 1 if side == 0 else 0)
            first, second = _ENDS[axis]
            for name, chosen in ((first if side else second, end), ("walls", ~end)):
                boundary[name].append((quads[chosen], owners[one][chosen]))
    quads, owner, neighbour = (np.concatenate(parts) for parts in zip(*internal))
    order = np.lexsort((neighbour, owner))
    faces, owners = [quads[order]], [owner[order]]
    patches, start = {}, len(order)
    for name in PATCHES:
        patch_faces = [q for q, _ in boundary[name]]
        patch_owners = [o for _, o in boundary[name]]
        faces.append(np.concatenate(patch_faces) if patch_faces else np.empty((0, 4), np.int64))
        owners.append(np.concatenate(patch_owners) if patch_owners else np.empty(0, np.int64))
        patches[name] = (start, len(owners[-1]))
        start += len(owners[-1])
    return np.concatenate(faces), np.concatenate(owners), neighbour[order], patches
