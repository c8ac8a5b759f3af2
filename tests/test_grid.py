"""The grid follows DPFEHM's regulargrid2d/3d conventions exactly."""

import numpy as np
import pytest
import torch

from flowlearn import Grid, ProblemError
from flowlearn.darcy.grid import axis_edges


def test_2d_node_order_is_y_fastest():
    grid = Grid((0, 0), (2, 1), (3, 2))  # nx = 3, ny = 2
    assert grid.shape == (2, 3)
    # DPFEHM: linearindex(i1, i2) = i2 + ny*(i1 - 1) with x = xs[i1], y = ys[i2].
    expected_x = [0, 0, 1, 1, 2, 2]
    expected_y = [0, 1, 0, 1, 0, 1]
    np.testing.assert_allclose(grid.coords, [expected_x, expected_y])
    image = np.arange(6).reshape(2, 3)  # rows = y, cols = x
    np.testing.assert_array_equal(grid.to_nodes(image), image.T.reshape(-1))


def test_2d_edges_and_areas_over_lengths_in_dpfehm_order():
    grid = Grid((0, 0), (4, 1), (3, 2), thickness=0.5)  # dx = 2, dy = 1
    # Per node in node order: +x neighbour (node + ny) first, then +y neighbour (node + 1).
    expected = [(0, 2), (0, 1), (1, 3), (2, 4), (2, 3), (3, 5), (4, 5)]
    np.testing.assert_array_equal(grid.edges, expected)
    x_aol, y_aol = 1 * 0.5 / 2, 2 * 0.5 / 1
    np.testing.assert_allclose(grid.areas_over_lengths, [x_aol, y_aol, x_aol, x_aol, y_aol, x_aol, y_aol])
    assert len(grid.edges) == 2 * 6 - 3 - 2
    np.testing.assert_allclose(grid.volumes, 2 * 1 * 0.5)


def test_3d_node_order_edges_and_counts():
    grid = Grid((0, 0, 0), (1, 2, 3), (2, 3, 4))
    nx, ny, nz = grid.ns
    assert grid.shape == (nz, ny, nx)
    assert len(grid.edges) == 3 * 24 - nx * ny - nx * nz - ny * nz
    # z fastest, then y, then x: node = (ix*ny + iy)*nz + iz.
    ix, iy, iz = 1, 2, 3
    node = (ix * ny + iy) * nz + iz
    np.testing.assert_allclose(grid.coords[:, node], [1.0, 2.0, 3.0])
    volume = np.arange(24.0).reshape(grid.shape)
    assert grid.to_nodes(volume)[node] == volume[iz, iy, ix]
    dx, dy, dz = grid.spacing
    aol = dict(zip(map(tuple, grid.edges), grid.areas_over_lengths))
    assert aol[(0, nz * ny)] == pytest.approx(dy * dz / dx)
    assert aol[(0, nz)] == pytest.approx(dx * dz / dy)
    assert aol[(0, 1)] == pytest.approx(dx * dy / dz)
    assert list(map(tuple, grid.edges[:3])) == [(0, nz * ny), (0, nz), (0, 1)]


@pytest.mark.parametrize("ns", [(3, 2), (4, 1), (2, 3, 4), (3, 1, 2)])
def test_edges_follow_dpfehm_node_by_node_then_x_y_z(ns):
    """Against regulargrid2d/3d's loop written out: nodes in node order (the last axis fastest), and at each node
    its +x, +y[, +z] neighbours where they exist."""
    grid = Grid((0.0,) * len(ns), tuple(float(n) for n in ns), ns)
    node = np.arange(grid.num_nodes).reshape(ns)  # node[ix, iy(, iz)]
    expected = []
    for position in np.ndindex(*ns):
        for axis in range(len(ns)):
            if position[axis] + 1 < ns[axis]:
                neighbour = list(position)
                neighbour[axis] += 1
                expected.append((node[position], node[tuple(neighbour)], axis))
    expected = np.array(expected).reshape(-1, 3)
    np.testing.assert_array_equal(grid.edges, expected[:, :2])
    np.testing.assert_array_equal(grid.edge_axes, expected[:, 2])


@pytest.mark.parametrize("shape", [(2, 3), (5, 1), (1, 4), (3, 4, 5)])
def test_axis_edges_pair_each_pixel_with_its_next_neighbour_along_x_then_y_then_z(shape):
    """Against the pairs built pixel by pixel in image (C) order: per axis x, y[, z], each pixel with the next one
    along the axis, where there is one."""
    index = np.arange(np.prod(shape)).reshape(shape)
    expected = []
    for image_axis in reversed(range(len(shape))):  # x is the image's last axis
        pairs = []
        for position in np.ndindex(*shape):
            if position[image_axis] + 1 < shape[image_axis]:
                neighbour = list(position)
                neighbour[image_axis] += 1
                pairs.append((index[position], index[tuple(neighbour)]))
        expected.append(pairs)
    edges, counts = axis_edges(shape)
    assert counts == tuple(len(pairs) for pairs in expected)
    np.testing.assert_array_equal(
        edges, np.array([pair for pairs in expected for pair in pairs]).reshape(-1, 2)
    )


def test_image_node_round_trip_numpy_and_torch():
    grid = Grid.from_image((5, 7), spacing=1e-4)
    image = np.random.default_rng(0).normal(size=(3, 5, 7))
    np.testing.assert_array_equal(grid.to_image(grid.to_nodes(image)), image)
    tensor = torch.from_numpy(image)
    assert torch.equal(grid.to_image(grid.to_nodes(tensor)), tensor)
    np.testing.assert_array_equal(grid.to_nodes(tensor).numpy(), grid.to_nodes(image))


def test_fracture_grid_spacing_matches_the_original_setup():
    grid = Grid.from_image((256, 260), spacing=1e-4, thickness=0.01)
    assert grid.ns == (260, 256)
    dx, dy = grid.spacing
    assert dx == pytest.approx(260e-4 / 259) and dy == pytest.approx(256e-4 / 255)


@pytest.mark.parametrize("ns", [(0, 4), (3, 0), (2, 2, 0)])
def test_empty_grid_is_rejected(ns):
    with pytest.raises(ProblemError, match="empty"):
        Grid((0,) * len(ns), (1,) * len(ns), ns)
