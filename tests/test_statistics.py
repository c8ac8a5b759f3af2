"""Dimensionless fracture statistics (flowlearn.fractures.statistics): values by hand, ranges, and the lines of the
out-of-range warnings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flowlearn.fractures.statistics import UNCOMPARED, aperture_statistics, out_of_range, statistic_ranges


def test_statistics_of_a_map_half_closed():
    # Half the cells closed, half open at 2e-4 m: mean 1e-4 m = 10 voxels of 1e-5 m, standard deviation 1e-4,
    # contact fraction 1/2; 6 columns and 4 rows are 0.6 and 0.4 mean apertures.
    aperture = np.zeros((4, 6))
    aperture[:, :3] = 2e-4
    expected = {
        "relative_std": 1.0,
        "contact_fraction": 0.5,
        "aperture_voxels": 10,
        "length": 0.6,
        "breadth": 0.4,
    }
    assert aperture_statistics(aperture, 1e-5) == pytest.approx(expected, rel=1e-12)
    # The same fracture in other units, or at another scale with its voxels: the same numbers.
    assert aperture_statistics(aperture * 1e6, 1e-5 * 1e6) == pytest.approx(expected, rel=1e-12)
    volume = aperture_statistics(np.full((2, 3, 5), 1e-4), 1e-4)
    assert (volume["depth"], volume["breadth"], volume["length"]) == pytest.approx((2, 3, 5))
    assert volume["relative_std"] == pytest.approx(0, abs=1e-15)
    assert math.isnan(aperture_statistics(np.zeros((3, 3)), 1e-5)["relative_std"])
    unknown = aperture_statistics(aperture, math.nan)
    assert unknown["relative_std"] == 1.0
    assert all(math.isnan(unknown[name]) for name in ("aperture_voxels", "length", "breadth"))


def test_ranges_and_the_lines_for_values_outside_them():
    ranges = statistic_ranges(
        [
            {"aperture_voxels": 4.0, "length": 16.0},
            {"aperture_voxels": 8.0, "length": 16.0, "relative_std": math.nan},
        ]
    )
    assert ranges == {"aperture_voxels": [4.0, 8.0], "length": [16.0, 16.0]}
    assert out_of_range({"aperture_voxels": 8.0, "length": 16.0, "contact_fraction": 0.3}, ranges) == []
    assert out_of_range({"aperture_voxels": 2.0, "length": 40.0}, ranges) == [
        "mean aperture 2 pixels is outside the training range [4, 8] pixels: 0.5 times the lowest",
        "map length along the flow 40 mean apertures is outside the training range [16, 16] mean apertures: "
        "2.5 times the highest",
    ]
    # A range that ends at 0 (no contact in training) says how far above it a value is.
    assert out_of_range({"contact_fraction": 0.2}, {"contact_fraction": [0.0, 0.0]}) == [
        "contact fraction 0.2 is outside the training range [0, 0]: +0.2 from the highest"
    ]
    # Without a voxel size, one line says what is not compared; the rest still is.
    lines = out_of_range(
        {"contact_fraction": 0.2, "aperture_voxels": math.nan}, ranges | {"contact_fraction": [0, 0.1]}
    )
    assert lines == [
        "contact fraction 0.2 is outside the training range [0, 0.1]: 2 times the highest",
        UNCOMPARED,
    ]
