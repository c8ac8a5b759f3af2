"""LBM reference driver (lbmpy): Poiseuille flow between plates, conservation, and the output contract.

The maps are 8 x 24 with gaps of at most 8 voxels wherever the test allows it: one lbmpy time step, built once
(30-60 s), then serves them all.
"""

import numpy as np
import pytest
from conftest import require_lbm

from flowlearn.data.files import read_fracture, write_fractures
from flowlearn.data.schema import validate_fracture
from flowlearn.errors import ReferenceConvergenceError
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture
from flowlearn.reference.generate import generate_fracture
from flowlearn.reference.lbm import LBMSettings, simulate
from flowlearn.reference.voxels import voxelize, voxelize_aperture

require_lbm()

H, W, B = 8, 24, 6
SETTINGS = LBMSettings(tolerance=1e-8, threads=2)


@pytest.fixture(scope="module")
def plates():
    """Smooth parallel plates B voxels apart; the y faces are planes of symmetry, so the flow is uniform."""
    return simulate(voxelize_aperture(np.full((H, W), float(B))), SETTINGS, progress=False)


def pressure_gradient(result) -> float:
    """dp/dx (lattice units) from a straight-line fit through the centre row."""
    return float(np.polyfit(np.arange(W), result.pressure_lattice[H // 2], 1)[0])


def test_plates_pressure_is_linear_from_inlet_2_to_outlet_1(plates):
    assert plates.converged and plates.residual < SETTINGS.tolerance
    # The analytic solution between plates is the straight line 2 - c/(W-1) in every row.
    np.testing.assert_allclose(plates.pressure, np.tile(2 - np.arange(W) / (W - 1), (H, 1)), atol=5e-3)


def test_plates_reproduce_the_cubic_law(plates):
    """Flux per unit width q = b³/(12 μ) (-dp/dx), with μ = ρ ν and ρ = 1 in lattice units."""
    cubic = B**3 * -pressure_gradient(plates) / (12 * SETTINGS.viscosity)
    assert plates.flux[H // 2, W // 2] == pytest.approx(cubic, rel=0.03)


def test_plates_velocity_profile_is_poiseuille_with_walls_half_way(plates):
    """u(z) = (-dp/dx)/(2 μ) (b²/4 - z²) at the voxel centres, walls half-way to the solid voxels."""
    z = np.arange(B) - (B - 1) / 2
    exact = -pressure_gradient(plates) / (2 * SETTINGS.viscosity) * (B**2 / 4 - z**2)
    np.testing.assert_allclose(plates.velocity[H // 2, W // 2], exact, rtol=5e-3)


@pytest.mark.slow  # a second relaxation rate: a lbmpy build of 30-60 s
def test_plates_flux_does_not_depend_on_viscosity():
    """With the TRT magic parameter 3/16 the bounce-back wall position, hence the permeability, is exact for
    any relaxation rate; a plain change of omega must leave the permeability unchanged."""
    omegas = (SETTINGS.omega, 1.4)
    runs = [
        simulate(
            voxelize_aperture(np.full((H, W), 4.0)),
            LBMSettings(omega=om, tolerance=1e-8, threads=SETTINGS.threads),
            progress=False,
        )
        for om in omegas
    ]
    perm = [
        r.flux[H // 2, W // 2]
        * LBMSettings(omega=om).viscosity
        / -np.polyfit(np.arange(W), r.pressure_lattice[H // 2], 1)[0]
        for r, om in zip(runs, omegas, strict=True)
    ]
    assert perm[0] == pytest.approx(perm[1], rel=1e-3)


@pytest.fixture(scope="module")
def obstacle():
    """An 8 x 24 gap of 4 voxels with a contact spot (zero aperture) in the middle."""
    aperture = np.full((H, W), 4.0)
    aperture[2:6, 10:14] = 0.0
    return simulate(voxelize_aperture(aperture), SETTINGS, progress=False)


def test_flux_is_conserved_around_a_contact_spot(obstacle):
    total = obstacle.flux.sum(axis=0)
    np.testing.assert_allclose(total, total.mean(), rtol=1e-4)
    assert (obstacle.flux[2:6, 10:14] == 0).all()


def test_contact_spot_is_inactive_and_output_fits_schema(obstacle):
    assert not obstacle.active[2:6, 10:14].any() and obstacle.active.sum() == H * W - 16
    np.testing.assert_allclose(obstacle.pressure[:, 0][obstacle.active[:, 0]].mean(), 2.0)
    np.testing.assert_allclose(obstacle.pressure[:, -1][obstacle.active[:, -1]].mean(), 1.0)
    # Upstream of the obstacle the pressure piles up; downstream it is lower than the straight line.
    line = 2 - np.arange(W) / (W - 1)
    assert obstacle.pressure[4, 9] > line[9] and obstacle.pressure[4, 14] < line[14]


def test_generated_rough_fracture_round_trips_through_the_schema(tmp_path):
    params = RoughnessParams((H, W), hurst=0.8, rms=2.0, mean_aperture=4.0, mismatch_length=64.0, seed=1)
    fr = generate_fracture(rough_fracture(params), SETTINGS, voxel_size=1e-5, name="r", progress=False)
    validate_fracture(fr)
    assert (fr.aperture == 0).any(), "these parameters give contact spots"
    write_fractures(tmp_path / "r.h5", [fr])
    got = read_fracture(tmp_path / "r.h5", "r")
    np.testing.assert_array_equal(got.pressure, fr.pressure)
    lbm = got.provenance["lbm"]
    assert lbm["convergence"]["converged"] and lbm["convergence"]["residual"] < 1e-6
    assert lbm["versions"]["lbmpy"] != "not installed" and got.provenance["roughness"]["seed"] == 1


def test_no_path_from_inlet_to_outlet_is_rejected():
    aperture = np.full((6, 10), 3.0)
    aperture[:, 5] = 0.0
    with pytest.raises(ValueError, match="no fluid path joins the inlet column to the outlet column"):
        simulate(voxelize_aperture(aperture), SETTINGS, progress=False)


def test_unconverged_run_raises_with_the_residual():
    fluid = voxelize_aperture(np.full((H, W), 3.0))
    with pytest.raises(
        ReferenceConvergenceError, match=r"not steady after 201 steps: relative change of the flow rate"
    ):
        simulate(fluid, LBMSettings(tolerance=1e-14, max_steps=200, threads=SETTINGS.threads), progress=False)


def test_voxelize_counts_cells_between_walls():
    bottom = np.array([[-1.2, 0.0]])
    top = np.array([[1.2, 0.0]])
    fluid = voxelize(bottom, top)
    # Voxel centres at -1.5, -0.5, 0.5 (box from floor(-1.2) = -2 to ceil(1.2) = 2): 2 of them lie in [-1.2, 1.2).
    assert fluid.shape == (1, 2, 4) and fluid.sum(axis=2).tolist() == [[2, 0]]
