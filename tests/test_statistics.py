"""Dimensionless fracture statistics (flowlearn.fractures.statistics): values by hand, ranges, and the lines of the
out-of-range warnings; the statistics rock joints are held against, and their table."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from flowlearn.fractures.statistics import (
    JOINT_RANGES,
    UNCOMPARED,
    aperture_statistics,
    hydraulic_ratio,
    joint_statistics,
    joint_table,
    out_of_range,
    statistic_ranges,
)


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


# ------------------------------------------------------------------------------------- against rock joints


def test_joint_statistics_of_a_tilted_plate():
    """Plates 4 voxels apart (of 1e-5 m), tilted along the flow at 0.2: no spread, no contact, b_h = ⟨b⟩ (the LCL of a
    uniform gap is the cubic law), and the slope of a plane, |∇m| = 0.2 for the mid-surface and 0.2/√2 for each wall's
    profiles pooled over both axes (those across the flow are flat)."""
    x = np.arange(16) * 1e-5
    bottom = np.tile(0.2 * x, (16, 1))
    statistics = joint_statistics(bottom, bottom + 4e-5, np.full((16, 16), 4e-5), 1e-5)
    assert statistics == pytest.approx(
        {
            "relative_std": 0.0,
            "contact_fraction": 0.0,
            "hydraulic_ratio": 1.0,
            "mid_slope": 0.2,
            "wall_slope": 0.2 / math.sqrt(2),
        },
        abs=1e-12,
    )


def test_the_wall_slope_is_taken_at_half_a_mean_aperture():
    # A wall that steps up and down by 1 voxel from column to column: it rises 1 over a lag of 1 voxel, and not at all
    # over 2. Half the mean aperture is 1 voxel at ⟨b⟩ = 2, 2 voxels at ⟨b⟩ = 4 (rows are flat either way).
    wall = np.tile(np.arange(8) % 2, (8, 1)).astype(float)
    rising = joint_statistics(wall, wall + 2, np.full((8, 8), 2.0), 1.0)["wall_slope"]
    assert rising == pytest.approx(
        math.sqrt(0.5)
    )  # 8 x 7 rises of 1 along the rows, 7 x 8 of 0 down the columns
    assert joint_statistics(wall, wall + 4, np.full((8, 8), 4.0), 1.0)["wall_slope"] == 0.0


def test_the_hydraulic_aperture_of_gaps_in_series_and_of_a_closed_map():
    """Two halves of apertures 1 and 3 along the flow: the LCL's resistances add column by column (the Darcy solve's
    edge takes the geometric mean of its nodes' T), against W - 1 edges of the unit gap."""
    h, w = 6, 10
    aperture = np.where(np.arange(w) < 5, 1.0, 3.0) * np.ones((h, 1))
    t = aperture[0] ** 3 / 12
    flow_rate = h / np.sum(1 / np.sqrt(t[:-1] * t[1:]))
    expected = (flow_rate / (h / 12 / (w - 1))) ** (1 / 3) / 2.0
    assert hydraulic_ratio(aperture) == pytest.approx(expected, rel=1e-9)
    assert joint_statistics(None, None, aperture, math.nan)["hydraulic_ratio"] == pytest.approx(
        expected, rel=1e-9
    )
    # Contacts all across the inlet column (or anywhere across the map): nothing flows, b_h is 0.
    closed = aperture.copy()
    closed[:, 0] = 0.0
    assert hydraulic_ratio(closed) == 0.0


def test_without_walls_or_voxel_size_the_slopes_are_not_measured():
    aperture = np.ones((6, 8))
    for statistics in (
        joint_statistics(None, None, aperture, 1.0),
        joint_statistics(-aperture / 2, aperture / 2, aperture, math.nan),
    ):
        assert math.isnan(statistics["mid_slope"]) and math.isnan(statistics["wall_slope"])
        assert statistics["hydraulic_ratio"] == pytest.approx(1.0)


def test_a_joint_range_holds_by_its_median_each_value_and_share():
    contact = JOINT_RANGES["contact_fraction"]
    assert contact.text() == "each 0-0.3, >= 45% at >= 0.05"
    assert contact.holds(np.array([0.0, 0.06, 0.1, 0.2]))
    assert not contact.holds(np.array([0.0, 0.06, 0.1, 0.31]))  # one beyond 30 %
    assert not contact.holds(np.array([0.0, 0.01, 0.02, 0.06]))  # a quarter at 5 % or more
    assert JOINT_RANGES["hydraulic_ratio"].text() == "median <= 0.9"
    assert JOINT_RANGES["mid_slope"].holds(np.array([0.01, 0.3, 2.0]))  # the median alone counts
    assert not JOINT_RANGES["mid_slope"].holds(np.array([0.01, 0.45, 2.0]))


def test_the_joint_table_lists_what_is_measured_and_says_what_meets_its_range():
    rows = [
        {"relative_std": 0.5, "contact_fraction": 0.1, "hydraulic_ratio": 0.95, "mid_slope": math.nan},
        {"relative_std": 0.7, "contact_fraction": 0.0, "hydraulic_ratio": 0.97, "mid_slope": math.nan},
    ]
    lines = joint_table(rows)
    assert lines[0].startswith("statistic") and lines[0].endswith("sources")
    assert (
        len(lines) == 4
    )  # the slopes, NaN for every fracture, and the reference's b_h, absent, are left out
    assert re.match(
        r"σ/⟨b⟩ +0\.600  0\.550-0\.650  0\.5-0\.7 +median 0\.4-1\.2 +yes +Hakami & Larsson 1996", lines[1]
    )
    assert re.match(
        r"contact area +0\.050 .*0-0\.1 \(50% >= 0\.05\) +each 0-0\.3, >= 45% at >= 0\.05 +yes ", lines[2]
    )
    assert re.match(r"b_h/⟨b⟩, LCL of the map +0\.960 .* median <= 0\.9 +NO ", lines[3])
