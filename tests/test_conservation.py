"""``flowlearn check``: the column flux a reference pressure implies under a local law, and its variation.

The expected values come from conservation: the steady Darcy solution of any local law passes the same flow rate
through every column, and that rate is the outlet's. A reference that is such a solution varies by round-off
under its own law (and under no other); a perturbed one does not.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import EXAMPLE_FRACTURE

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.cli import main
from flowlearn.darcy.flux import column_flow_rates, outlet_flow_rate
from flowlearn.data.files import read_fracture, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture
from flowlearn.reference.conservation import MARGIN, TOLERANCE, check_files, check_fracture, summary

SHAPE = (24, 40)


def darcy_fracture(exponent: float, seed: int = 0, name: str = "darcy") -> Fracture:
    """A rough fracture with contact spots whose reference is the Darcy solution of T ∝ Ap^exponent."""
    params = RoughnessParams(
        SHAPE, hurst=0.8, rms=1.0, mean_aperture=2.0, mismatch_length=math.inf, seed=seed
    )
    aperture = rough_fracture(params).aperture * 1e-5
    assert (aperture == 0).any(), "the test fracture should have contact spots"
    problem = DarcyProblem.fracture(SHAPE, active=aperture > 0, drop_unconnected=True)
    log_t = np.where(problem.active, exponent * np.log(np.where(problem.active, aperture, 1.0)), 0.0)
    pressure = solve_pressure(torch.from_numpy(log_t), problem).numpy()
    return Fracture(name, aperture, np.where(problem.active, pressure, 1.5), voxel_size=1e-5)


def bumped(fracture: Fracture, amplitude: float) -> Fracture:
    """``fracture`` with a smooth bump added to its reference pressure, zero on the inlet and outlet columns."""
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]]
    bump = np.sin(np.pi * x / (SHAPE[1] - 1)) * np.cos(2 * np.pi * y / SHAPE[0])
    return dataclasses.replace(fracture, pressure=fracture.pressure + amplitude * bump)


def test_every_column_of_a_darcy_solution_passes_the_outlet_flow_rate():
    fracture = darcy_fracture(3.0)
    problem = DarcyProblem.fracture(SHAPE, active=fracture.active, drop_unconnected=True)
    log_t = torch.from_numpy(np.log(np.where(problem.active, fracture.aperture, 1.0)) * 3)
    pressure = solve_pressure(log_t, problem)
    rates = column_flow_rates(log_t, pressure, problem)
    assert rates.shape == (SHAPE[1] - 1,)
    outlet = outlet_flow_rate(log_t, pressure, problem)
    torch.testing.assert_close(rates, outlet.expand(SHAPE[1] - 1), rtol=1e-10, atol=0)
    # Batched: each item its own rates.
    both = column_flow_rates(torch.stack([log_t, 2 * log_t]), torch.stack([pressure, pressure]), problem)
    torch.testing.assert_close(both[0], rates, rtol=0, atol=0)
    assert both[1].std() > 1e-3 * both[1].mean()  # another law's T on this pressure: no longer conserved


@pytest.mark.parametrize("exponent", [3.0, 2.3])
def test_a_darcy_reference_varies_by_round_off_under_its_own_law_only(exponent):
    check = check_fracture(darcy_fracture(exponent), "darcy")
    # The fit finds the exponent to ~1e-8, which leaves a variation of that order.
    assert check.power_law_exponent == pytest.approx(exponent, abs=1e-6)
    assert check.power_law_variation < 1e-7
    if exponent == 3.0:  # the LCL is its own law (its factor 1/12 changes no variation)
        assert check.lcl_variation < 1e-10
    else:
        assert check.lcl_variation > 10 * TOLERANCE


def test_a_perturbed_reference_varies_in_proportion_to_the_perturbation():
    exact = darcy_fracture(3.0)
    small, large = (check_fracture(bumped(exact, amplitude), "bumped") for amplitude in (1e-3, 2e-3))
    assert small.lcl_variation > 1e4 * check_fracture(exact, "exact").lcl_variation
    # A small perturbation adds its own column rates to the constant ones: the variation is linear in it.
    assert large.lcl_variation == pytest.approx(2 * small.lcl_variation, rel=0.02)
    # No power law undoes a perturbation of the pressure.
    assert small.power_law_variation > 0.5 * small.lcl_variation


def test_the_margin_leaves_out_the_boundary_layers_of_the_inlet_and_outlet():
    # An LBM reference's second column sits at the inlet head (its reservoir's boundary layer): that changes the
    # rates out of the first two columns only.
    exact = darcy_fracture(3.0)
    layered = exact.pressure.copy()
    layered[:, 1] = layered[:, 0]
    fracture = dataclasses.replace(exact, pressure=layered)
    # The first rate drops to 0 and the second doubles, roughly: two of 39 rates off by the mean, sqrt(2/39) = 0.23.
    assert check_fracture(fracture, "layered", margin=0).lcl_variation == pytest.approx(
        math.sqrt(2 / 39), rel=0.2
    )
    assert check_fracture(fracture, "layered", margin=MARGIN).lcl_variation < 1e-10


def test_fractures_that_cannot_be_checked_say_why():
    exact = darcy_fracture(3.0)
    assert check_fracture(dataclasses.replace(exact, pressure=None), "f").skipped == "no reference pressure"
    narrow = dataclasses.replace(exact, aperture=exact.aperture[:, :6], pressure=exact.pressure[:, :6])
    assert check_fracture(narrow, "f").skipped == "fewer than 2 column pairs inside the margins of 2"
    assert math.isnan(check_fracture(narrow, "f").lcl_variation)


def test_flowlearn_check_prints_a_row_per_fracture_and_what_it_means(tmp_path, capsys):
    exact = darcy_fracture(3.0, name="exact")
    darcy = tmp_path / "darcy.h5"
    write_fractures(darcy, [exact, dataclasses.replace(darcy_fracture(2.3, seed=1, name="other"))])
    assert main(["check", str(darcy)]) == 0
    table, line = capsys.readouterr().out.strip().rsplit("\n", 1)
    rows = table.splitlines()
    assert rows[0].split()[:3] == ["fracture", "size", "LCL"] and len(rows) == 3
    assert rows[1].startswith("darcy/exact") and "24x40" in rows[1] and "T ~ Ap^3.00" in rows[1]
    assert "T ~ Ap^2.30" in rows[2]
    assert line.startswith("all 2 fractures: column-flux variation at most 1.0 % under their best power law")
    assert line.endswith("A power law of the local aperture reproduces their reference pressure.")

    lbm_like = tmp_path / "lbm_like.h5"
    write_fractures(lbm_like, [bumped(exact, 1e-2), dataclasses.replace(exact, name="map", pressure=None)])
    assert main(["check", str(lbm_like), "--tolerance", "0.001"]) == 0
    table, line = capsys.readouterr().out.strip().rsplit("\n", 1)
    assert "no reference pressure" in table.splitlines()[2]
    assert line.startswith("1 of 1 fractures: column-flux variation above 0.1 % under every power law")
    assert "a per-pixel W (model=pixel, one fracture at a time) is the only model that can fit them" in line
    assert line == summary(check_files([lbm_like]), tolerance=0.001)


@pytest.mark.skipif(not EXAMPLE_FRACTURE.exists(), reason="the shared example fracture is absent")
def test_the_real_fracture_is_far_from_every_power_law():
    # Issue 15 measured 15 % under the LCL on this fracture; its LBM pressure is no Darcy solution of Ap alone.
    (check,) = check_files([EXAMPLE_FRACTURE])
    assert check.lcl_variation == pytest.approx(0.15, abs=0.01)
    assert check.power_law_variation > 0.1
    # Its own Darcy solution under the LCL varies only by the solve's tolerance (rtol 1e-11 on the energy norm of
    # the error leaves column fluxes equal to ~1e-9).
    fracture = read_fracture(EXAMPLE_FRACTURE, "fracture_1")
    problem = DarcyProblem.fracture(fracture.shape)
    log_t = torch.from_numpy(3 * np.log(fracture.aperture.astype(np.float64)))
    solved = dataclasses.replace(fracture, pressure=solve_pressure(log_t, problem).numpy())
    assert check_fracture(solved, "solved").lcl_variation < 1e-8
