"""Aperture statistics (flowlearn.data.statistics): values by hand, ranges, and the lines of the OOD warning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flowlearn.data.schema import Fracture
from flowlearn.data.statistics import aperture_statistics, out_of_range, statistic_ranges


def _fracture(aperture: np.ndarray) -> Fracture:
    return Fracture("f", aperture, None, voxel_size=1e-5)


def test_statistics_of_a_map_half_closed():
    # Half the cells closed, half open at 2e-4 m: mean 1e-4, standard deviation 1e-4, contact fraction 1/2.
    aperture = np.zeros((4, 6))
    aperture[:, :3] = 2e-4
    assert aperture_statistics(_fracture(aperture)) == pytest.approx(
        {"mean_aperture": 1e-4, "relative_std": 1.0, "contact_fraction": 0.5, "height": 4, "width": 6},
        rel=1e-12,
    )
    volume = aperture_statistics(_fracture(np.full((2, 3, 5), 1e-4)))
    assert (volume["depth"], volume["height"], volume["width"]) == (2, 3, 5)
    assert volume["relative_std"] == pytest.approx(0, abs=1e-15)
    assert math.isnan(aperture_statistics(_fracture(np.zeros((3, 3))))["relative_std"])


def test_ranges_and_the_lines_for_values_outside_them():
    ranges = statistic_ranges(
        [
            {"mean_aperture": 2e-5, "width": 64.0},
            {"mean_aperture": 5e-5, "width": 64.0, "relative_std": math.nan},
        ]
    )
    assert ranges == {"mean_aperture": [2e-5, 5e-5], "width": [64.0, 64.0]}
    assert out_of_range({"mean_aperture": 5e-5, "width": 64.0, "contact_fraction": 0.3}, ranges) == []
    assert out_of_range({"mean_aperture": 0.18, "width": 260.0}, ranges, voxel_size_known=False) == [
        "mean aperture 0.18 m is outside the training range [2e-05, 5e-05] m (the input's voxel size is unknown, "
        "so its apertures may not be in metres)",
        "map width 260 pixels is outside the training range [64, 64] pixels",
    ]
