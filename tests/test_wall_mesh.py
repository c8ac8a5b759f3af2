"""The wall-fitted mesh: walls evaluated exactly at the columns' corners, closed cells, the exact gap volume, contacts
left out, and OpenFOAM's face order. Geometry only; the solves on it are in test_stokes.py."""

from __future__ import annotations

import numpy as np
import pytest

from flowlearn.errors import ProblemError
from flowlearn.reference.wall_mesh import PATCHES, wall_corners, wall_mesh

H, W = 6, 8


def _mode(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A periodic wall on the H x W map, in pixels, at positions (y, x) in pixels: two Fourier modes."""
    return 0.7 * np.cos(2 * np.pi * (x / W + 2 * y / H)) + 0.4 * np.sin(2 * np.pi * 3 * x / W)


def _walls(gap: float) -> tuple[np.ndarray, np.ndarray]:
    y, x = np.meshgrid(np.arange(H, dtype=float), np.arange(W, dtype=float), indexing="ij")
    return _mode(y, x), _mode(y, x) + gap + 0.5 * np.cos(2 * np.pi * y / H)


@pytest.mark.parametrize("factor", [1, 2, 3])
def test_corners_are_the_wall_between_its_pixels(factor):
    """A fine pixel c sits at c / factor coarse pixels; its corners half a fine pixel either side, in fine pixels."""
    bottom, _ = _walls(4.0)
    corners = wall_corners(bottom, factor)
    position = (np.arange(factor * H + 1) - 0.5) / factor, (np.arange(factor * W + 1) - 0.5) / factor
    exact = factor * _mode(*np.meshgrid(*position, indexing="ij"))
    assert corners.shape == (factor * H + 1, factor * W + 1)
    assert np.allclose(corners, exact, atol=1e-12)


def _area_vectors(mesh) -> np.ndarray:
    """Each face's area vector, (F, 3): half the cross product of its diagonals (exact for a quadrilateral)."""
    p = mesh.points[mesh.faces]
    return 0.5 * np.cross(p[:, 2] - p[:, 0], p[:, 3] - p[:, 1])


@pytest.mark.parametrize("r", [1, 2])
def test_every_cell_is_closed_and_its_faces_point_out(r):
    """The outward area vectors of a closed cell sum to zero: with the owner's faces counted outward and the
    neighbour's inward, any face missing or turned the wrong way leaves a residue of a face's area."""
    mesh = wall_mesh(*_walls(3.0), r, reservoir=2)
    area = _area_vectors(mesh)
    cells = int(mesh.cells.sum())
    total = np.zeros((cells, 3))
    np.add.at(total, mesh.owner, area)
    np.add.at(total, mesh.neighbour, -area[: len(mesh.neighbour)])
    assert np.abs(total).max() < 1e-9 * np.abs(area).max()
    # OpenFOAM's order: internal faces by owner, then neighbour, the owner the lower label.
    internal = len(mesh.neighbour)
    assert np.all(mesh.owner[:internal] < mesh.neighbour)
    assert np.all(np.diff(mesh.owner[:internal] * cells + mesh.neighbour) > 0)
    assert list(mesh.patches) == list(PATCHES)
    assert sum(count for _, count in mesh.patches.values()) == len(mesh.faces) - internal


def test_the_gap_holds_the_walls_exact_volume():
    """The columns' thickness is the bilinear wall between exact corners; summed over a whole period it is the
    trapezoid rule on a periodic Fourier series, which is exact."""
    bottom, top = _walls(3.0)
    for r in (1, 2, 3):
        mesh = wall_mesh(bottom, top, r, reservoir=1)
        assert mesh.map_cells().all()  # open everywhere
        assert mesh.map_thickness().sum() / r**2 == pytest.approx((top - bottom).sum(), rel=1e-12)


def test_the_boundaries_lie_where_the_conditions_go():
    """Inlet and outlet are the reservoirs' far faces, full depth; the symmetry planes are flat at y = 0 and H."""
    mesh = wall_mesh(*_walls(3.0), 2, reservoir=2)
    x_max = W + 2 * 2
    for name, axis, value in (
        ("inlet", 0, 0.0),
        ("outlet", 0, x_max),
        ("symmetryLow", 1, 0.0),
        ("symmetryHigh", 1, H),
    ):
        start, count = mesh.patches[name]
        points = mesh.points[mesh.faces[start : start + count]]
        assert count > 0 and np.allclose(points[..., axis], value), name
    start, count = mesh.patches["inlet"]
    area = _area_vectors(mesh)[start : start + count]
    depth = mesh.points[:, 2].max() - mesh.points[:, 2].min()
    assert np.allclose(area[:, 1:], 0) and np.all(area[:, 0] < 0)  # pointing out of the box
    assert -area[:, 0].sum() == pytest.approx(H * depth)


def test_contacts_and_the_pockets_they_enclose_are_left_out():
    bottom, top = np.zeros((H, W)), np.full((H, W), 2.0)
    top[2:5, 3:6] = -1.0  # a ring of contact around (3, 4) ...
    top[3, 4] = 2.0  # ... enclosing a pocket, at 1 voxel per column
    mesh = wall_mesh(bottom, top, 1, reservoir=1)
    meshed = mesh.map_cells().any(axis=2)
    assert not meshed[3, 4]  # the pocket: no path to a reservoir
    # Every column with a corner in the contact is out; the rest, open at all four corners, is in.
    assert meshed.sum() > H * W / 2 and not meshed[2:5, 3:6].any()


def test_walls_closed_across_the_map_are_refused():
    bottom, top = np.zeros((H, W)), np.full((H, W), 2.0)
    top[:, 3:6] = -1.0  # wide enough that the Fourier wall's corners in column 4 are closed too
    with pytest.raises(ProblemError, match="no open path joins the inlet column to the outlet column"):
        wall_mesh(bottom, top, 1, reservoir=1)
