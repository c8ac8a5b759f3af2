"""The inclination factor of the local cubic law against parallel plates inclined to the map."""

import math

import numpy as np
import pytest
import torch

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.data.inclination import log_inclination_factor
from flowlearn.data.schema import Fracture
from flowlearn.models.baselines import baseline_log_t
from flowlearn.models.laws import InclinedCubicLaw, LocalCubicLaw

VOXEL = 1e-5
SHAPE = (6, 11)
GAP = 4e-5


def plates(slope_x: float, slope_y: float, walls: bool = True, voxel_size: float = VOXEL) -> Fracture:
    """Parallel plates a vertical distance GAP apart whose mid-surface rises by slope_x per metre along the flow (x)
    and slope_y across it."""
    rows, columns = np.indices(SHAPE) * VOXEL
    bottom = slope_x * columns + slope_y * rows
    return Fracture(
        "plates",
        np.full(SHAPE, GAP),
        None,
        voxel_size=voxel_size,
        bottom=bottom if walls else None,
        top=bottom + GAP if walls else None,
    )


def flow_rate_of(fracture: Fracture) -> float:
    """Outlet flow rate of the inclined baseline's Darcy solve on unit pixels and unit thickness, heads 2 → 1."""
    problem = DarcyProblem.fracture(SHAPE, pixel_size=1.0, thickness=1.0)
    log_aperture = torch.log(torch.from_numpy(fracture.aperture)).unsqueeze(0)
    log_inclination = torch.from_numpy(log_inclination_factor(fracture)).unsqueeze(0)
    pixel = torch.tensor([VOXEL], dtype=torch.float64)
    active = torch.ones_like(log_aperture, dtype=torch.bool)
    log_t = baseline_log_t("inclined", log_aperture, active, pixel, math.nan, log_inclination)[0]
    return float(outlet_flow_rate(log_t, solve_pressure(log_t, problem), problem))


def parallel_plate_flow_rate(transmissivity: float) -> float:
    # Darcy's law over the W - 1 node spacings of H rows: Q = H · T · Δh / (W - 1).
    return SHAPE[0] * transmissivity * (2.0 - 1.0) / (SHAPE[1] - 1)


@pytest.mark.parametrize("slope", [0.3, 1.0, 2.5])
def test_plates_inclined_along_the_flow_carry_the_flow_of_the_narrower_gap_over_the_longer_path(slope):
    # The gap normal to the plates is b cos θ; the flow runs along them, 1/cos θ longer than the map: per unit width
    # of the map, q = (b cos θ)³/12 · Δh / (L / cos θ).
    cos = math.cos(math.atan(slope))
    expected = parallel_plate_flow_rate((GAP * cos) ** 3 / 12 * cos)
    assert flow_rate_of(plates(slope, 0.0)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("slope", [0.3, 1.0, 2.5])
def test_plates_inclined_across_the_flow_carry_the_flow_of_the_narrower_but_wider_gap(slope):
    # The same narrower gap b cos θ, a horizontal path, and a surface 1/cos θ wider than its map.
    cos = math.cos(math.atan(slope))
    expected = parallel_plate_flow_rate((GAP * cos) ** 3 / 12 / cos)
    assert flow_rate_of(plates(0.0, slope)) == pytest.approx(expected, rel=1e-12)


def test_the_factor_is_the_flow_component_of_the_surface_transmissivity_projected_onto_the_map():
    # A plane m = a x + c y: surface metric g = I + ∇m∇mᵀ, map tensor t √det g g⁻¹ with t = (b cos θ)³/12.
    gradient = np.array([0.7, -1.3])
    metric = np.eye(2) + np.outer(gradient, gradient)
    cos = 1 / math.sqrt(1 + gradient @ gradient)
    tensor = (GAP * cos) ** 3 / 12 * math.sqrt(np.linalg.det(metric)) * np.linalg.inv(metric)
    factor = np.exp(log_inclination_factor(plates(*gradient)))
    np.testing.assert_allclose(factor * GAP**3 / 12, tensor[0, 0], rtol=1e-12)


def test_without_walls_or_voxel_size_the_factor_is_unknown_and_the_inclined_law_is_the_lcl():
    for fracture in (plates(0.5, 0.5, walls=False), plates(0.5, 0.5, voxel_size=math.nan)):
        assert np.isnan(log_inclination_factor(fracture)).all()
    rng = np.random.default_rng(0)
    log_aperture = torch.from_numpy(rng.normal(size=(2, *SHAPE)))
    raw = torch.from_numpy(rng.normal(size=(2, *SHAPE)))
    active = torch.ones_like(log_aperture, dtype=torch.bool)
    unknown = torch.full_like(log_aperture, math.nan)
    lcl = LocalCubicLaw().log_k(log_aperture, raw, active, unknown)
    assert torch.equal(InclinedCubicLaw().log_k(log_aperture, raw, active, unknown), lcl)
    known = torch.from_numpy(log_inclination_factor(plates(0.5, 0.2)))
    inclined = InclinedCubicLaw().log_k(log_aperture, raw, active, known.expand_as(raw))
    torch.testing.assert_close(inclined - lcl, known.expand_as(raw), rtol=0, atol=1e-14)
