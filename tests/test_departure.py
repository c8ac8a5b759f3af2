"""Departure from the local cubic law: Q_LCL of a Darcy solve, the summary and the `flowlearn departure` command."""

import re

import numpy as np
import pytest

from flowlearn.cli import main
from flowlearn.data.files import write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.reference.departure import departure, departures, hydraulic_aperture, lcl_flow_rate, summarize


def uniform_gap(name: str, aperture: float, shape=(7, 7), ratio: float = 1.0, **geometry) -> Fracture:
    """A uniform gap whose reference flow rate is ``ratio`` times the cubic law's H b³/12 / (W - 1)."""
    h, w = shape
    return Fracture(
        name=name,
        aperture=np.full(shape, aperture),
        pressure=np.tile(2.0 - np.arange(w) / (w - 1), (h, 1)),
        voxel_size=1e-5,
        flow_rate=ratio * h * aperture**3 / 12 / (w - 1),
        provenance={"geometry": geometry},
    )


def test_lcl_flow_rate_of_a_uniform_gap_is_the_cubic_law():
    fracture = uniform_gap("u", 3e-5)
    assert lcl_flow_rate(fracture) == pytest.approx(7 * (3e-5) ** 3 / 12 / 6, rel=1e-12)


def test_lcl_flow_rate_of_gaps_in_series_is_harmonic():
    """Two halves of apertures a and b along the flow: the cubic law's resistances add, column by column."""
    h, w = 10, 10
    aperture = np.where(np.arange(w) < 5, 2e-5, 4e-5) * np.ones((h, 1))
    fracture = Fracture("s", aperture, np.tile(2.0 - np.arange(w) / (w - 1), (h, 1)), voxel_size=1e-5)
    t = aperture[0] ** 3 / 12
    edges = np.sqrt(t[:-1] * t[1:])  # the geometric mean of the nodes' T on each edge
    assert lcl_flow_rate(fracture) == pytest.approx(h / np.sum(1 / edges), rel=1e-12)


def test_departures_and_summary(tmp_path):
    path = tmp_path / "d.h5"
    gaps = [
        uniform_gap(f"f{i}", 2e-5, ratio=r, relative_std=0.1 * i)
        for i, r in enumerate((0.5, 0.85, 0.95, 1.1))
    ]
    write_fractures(
        path, [*gaps, Fracture("noflow", np.full((7, 7), 2e-5), gaps[0].pressure, voxel_size=1e-5)]
    )
    rows = departures(path)
    assert [r.name for r in rows] == ["f0", "f1", "f2", "f3"]
    np.testing.assert_allclose([r.ratio for r in rows], [0.5, 0.85, 0.95, 1.1], rtol=1e-10)
    summary = summarize(rows)
    assert summary["median_departure"] == pytest.approx(0.125)  # of |r - 1| = 0.5, 0.15, 0.05, 0.1
    assert summary["share_departing_20pct"] == 0.25 and summary["share_lcl_overestimates"] == 0.75


def test_departure_command_prints_the_spread_and_draws_the_figure(tmp_path, capsys):
    path = tmp_path / "d.h5"
    write_fractures(
        path, [uniform_gap("a", 2e-5, ratio=0.6, relative_std=0.3, wall_slope=0.5, contact_fraction=0.0)]
    )
    figure = tmp_path / "departure.png"
    assert main(["departure", str(path), "--table", "--figure", str(figure)]) == 0
    out = capsys.readouterr().out
    # name, σ/⟨b⟩, contact, b_h/⟨b⟩ = 0.6^(1/3), Q/Q_LCL, slope (no walls), convergence (not recorded)
    assert "a                  0.000    0.000    0.843    0.600    nan       -" in out
    assert "median 40.0%" in out and "100% of the fractures depart" in out
    # The table against rock joints: a uniform gap has b_h = ⟨b⟩ under the LCL, 0.6^(1/3) of it under its reference.
    assert "against rock joints, 1 fractures:" in out
    assert re.search(r"\nb_h/⟨b⟩, LCL of the map +1\.000 .* median <= 0\.9 +NO ", out)
    assert re.search(r"\nb_h/⟨b⟩, reference flow rate +0\.843 .* median <= 0\.9 +yes ", out)
    assert "mid-surface slope" not in out  # no walls: not measured, not listed
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_against_rock_joints_leaves_out_the_exact_cases(tmp_path, capsys):
    plates = uniform_gap("plates", 2e-5, ratio=0.99)
    plates.provenance["roughness"] = {"kind": "parallel"}
    rough = uniform_gap("rough", 2e-5, ratio=0.7)
    rough.aperture[2:4, 3] = 0.0  # two contact pixels of 49
    rough.provenance["roughness"] = {"kind": "rough"}
    path = tmp_path / "d.h5"
    write_fractures(path, [plates, rough])
    assert main(["departure", str(path)]) == 0
    out = capsys.readouterr().out
    assert "against rock joints, 1 fractures (left out: 1 exact case(s), plates or flat mid-surfaces):" in out
    assert re.search(r"\ncontact area +0\.041 ", out)


def test_departure_command_on_a_file_without_flow_rates_is_one_line(tmp_path, capsys):
    path = tmp_path / "d.h5"
    gap = uniform_gap("a", 2e-5)
    write_fractures(path, [Fracture(**{**gap.__dict__, "flow_rate": None})])
    assert main(["departure", str(path)]) == 2
    assert "no fracture stores a flow_rate" in capsys.readouterr().err


def test_hydraulic_aperture_of_a_uniform_gap_is_its_aperture_times_the_cube_root_of_the_ratio():
    assert hydraulic_aperture(uniform_gap("u", 3e-5, ratio=0.5)) == pytest.approx(
        3e-5 * 0.5 ** (1 / 3), rel=1e-12
    )


def test_the_table_reads_contacts_from_the_map_the_slope_from_the_walls_and_the_recorded_convergence():
    gap = uniform_gap("t", 2e-5, shape=(8, 9), ratio=0.9)
    aperture = gap.aperture.copy()
    aperture[3, 4] = 0.0  # one contact pixel of 72
    x = np.arange(9) * 1e-5
    bottom = np.tile(0.2 * x, (8, 1)) - 1e-5  # a plate tilted along the flow at slope 0.2
    fracture = Fracture(
        **{**gap.__dict__, "aperture": aperture, "bottom": bottom, "top": bottom + 2e-5},
    )
    fracture.provenance["convergence"] = {"flow_rate_change": 0.013, "how": "measured"}
    row = departure(fracture)
    assert row.contact_fraction == pytest.approx(1 / 72)
    assert row.mid_slope == pytest.approx(0.2, rel=1e-9)
    assert row.convergence == 0.013
    assert row.relative_std == pytest.approx(np.std(aperture) / np.mean(aperture))
