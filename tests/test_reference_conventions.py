"""How a 3D reference becomes the dataset's 2D fields: which cells carry flow, and the heads of the end columns."""

from __future__ import annotations

import numpy as np
import pytest

from flowlearn.errors import ProblemError
from flowlearn.reference.voxels import end_pressure, flowing_cells, gap_pressure


def test_only_cells_joined_to_both_ends_carry_flow():
    open_map = np.zeros((5, 6), bool)
    open_map[2] = True  # the channel from the inlet to the outlet
    open_map[1, 3] = True  # a dead end off the channel: joined to both ends through it
    open_map[0, 0] = True  # a pocket on the inlet column alone
    open_map[4, 4:] = True  # a pocket reaching the outlet alone
    expected = np.zeros((5, 6), bool)
    expected[2] = expected[1, 3] = True
    np.testing.assert_array_equal(flowing_cells(open_map), expected)


def test_a_map_closed_across_carries_nothing():
    open_map = np.ones((4, 6), bool)
    open_map[:, 3] = False
    with pytest.raises(ProblemError, match="no fluid path joins the inlet column to the outlet column"):
        flowing_cells(open_map)


def test_an_end_column_is_the_mean_of_its_cells_weighted_by_their_flow():
    active = np.ones(3, bool)
    # A cell that passes no flow (a contact's rim fed from the reservoir) does not move the head.
    assert end_pressure(np.array([2.3, 1.9, 2.1]), np.array([0.0, 1.0, 1.0]), active) == pytest.approx(2.0)
    assert end_pressure(np.array([1.0, 2.0, 9.0]), np.array([1.0, 3.0, 5.0]), np.array([1, 1, 0], bool)) == (
        pytest.approx(1.75)
    )
    # Where nothing flows the plain mean stands.
    assert end_pressure(np.array([1.0, 2.0, 4.0]), np.zeros(3), active) == pytest.approx(7 / 3)


def test_the_normalised_pressure_puts_the_heads_at_the_flowing_means():
    # Two rows, three columns, two cells deep; the first row's inlet cell holds 5 but passes no flow.
    pressure = np.array([[[5.0, 5.0], [2.0, 2.0], [1.0, 1.0]], [[3.0, 3.0], [2.0, 2.0], [1.0, 1.0]]])
    speed = np.ones_like(pressure)
    speed[0, 0] = 0.0
    fluid = np.ones(pressure.shape, bool)
    result = gap_pressure(pressure, speed, fluid, np.ones((2, 3), bool))
    assert (result.inlet, result.outlet) == (pytest.approx(3.0), pytest.approx(1.0))
    # Heads 2 and 1 at the inlet's flowing cell and the outlet.
    np.testing.assert_allclose(result.pressure, [[3.0, 1.5, 1.0], [2.0, 1.5, 1.0]])
