"""The inclination tensor of the local cubic law against parallel plates inclined to the map, and its smoothing."""

import math

import numpy as np
import pytest
import torch
from scipy import signal

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.data.schema import Fracture
from flowlearn.fractures.inclination import inclination_tensor, smoothed_gradient
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture
from flowlearn.models.baselines import baseline_log_t
from flowlearn.models.laws import Geometry, InclinedCubicLaw, LocalCubicLaw

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


def inclined_flow_rate(fracture: Fracture, smoothing: float = 1.0) -> float:
    """Outlet flow rate of the inclined baseline's Darcy solve on unit pixels and unit thickness, heads 2 → 1."""
    shape = fracture.shape
    problem = DarcyProblem.fracture(shape, pixel_size=1.0, thickness=1.0)
    log_aperture = torch.log(torch.from_numpy(fracture.aperture)).unsqueeze(0)
    inclination = torch.from_numpy(inclination_tensor(fracture, smoothing)).unsqueeze(0)
    slope = torch.zeros(1, 2, *shape, dtype=torch.float64)
    active = torch.ones_like(log_aperture, dtype=torch.bool)
    log_t = baseline_log_t("inclined", log_aperture, active, math.nan, inclination, slope)
    return float(outlet_flow_rate(log_t, solve_pressure(log_t, problem), problem)[0])


def parallel_plate_flow_rate(transmissivity: float, shape: tuple[int, int] = SHAPE) -> float:
    # Darcy's law over the W - 1 node spacings of H rows: Q = H · T · Δh / (W - 1).
    return shape[0] * transmissivity * (2.0 - 1.0) / (shape[1] - 1)


@pytest.mark.parametrize("slope", [0.3, 1.0, 2.5])
def test_plates_inclined_along_the_flow_carry_the_flow_of_the_narrower_gap_over_the_longer_path(slope):
    # The gap normal to the plates is b cos θ; the flow runs along them, 1/cos θ longer than the map: per unit width
    # of the map, q = (b cos θ)³/12 · Δh / (L / cos θ), i.e. cos⁴θ times the LCL's.
    cos = math.cos(math.atan(slope))
    expected = parallel_plate_flow_rate((GAP * cos) ** 3 / 12 * cos)
    assert inclined_flow_rate(plates(slope, 0.0)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("slope", [0.3, 1.0, 2.5])
def test_plates_inclined_across_the_flow_carry_the_flow_of_the_narrower_but_wider_gap(slope):
    # The same narrower gap b cos θ, a horizontal path, and a surface 1/cos θ wider than its map: cos²θ.
    cos = math.cos(math.atan(slope))
    expected = parallel_plate_flow_rate((GAP * cos) ** 3 / 12 / cos)
    assert inclined_flow_rate(plates(0.0, slope)) == pytest.approx(expected, rel=1e-12)


def test_the_tensor_is_the_surface_transmissivity_projected_onto_the_map():
    # A plane m = a x + c y: surface metric g = I + ∇m∇mᵀ, map tensor t √det g g⁻¹ with t = (b cos θ)³/12.
    gradient = np.array([0.7, -1.3])
    metric = np.eye(2) + np.outer(gradient, gradient)
    cos = 1 / math.sqrt(1 + gradient @ gradient)
    tensor = (GAP * cos) ** 3 / 12 * math.sqrt(np.linalg.det(metric)) * np.linalg.inv(metric)
    log_xx, log_yy, rho = (
        inclination_tensor(plates(*gradient)) + np.log(GAP**3 / 12) * np.array([1, 1, 0])[:, None, None]
    )
    np.testing.assert_allclose(np.exp(log_xx), tensor[0, 0], rtol=1e-12)
    np.testing.assert_allclose(np.exp(log_yy), tensor[1, 1], rtol=1e-12)
    np.testing.assert_allclose(rho * np.exp(0.5 * (log_xx + log_yy)), tensor[0, 1], rtol=1e-12)
    # Smoothing leaves a plane's slope, and so its tensor, exactly as it is, up to the map's edges.
    np.testing.assert_allclose(
        inclination_tensor(plates(*gradient), smoothing=3.0),
        inclination_tensor(plates(*gradient), 0.0),
        rtol=1e-13,
    )


def test_without_walls_or_voxel_size_the_tensor_is_unknown_and_the_inclined_law_is_the_lcl():
    for fracture in (plates(0.5, 0.5, walls=False), plates(0.5, 0.5, voxel_size=math.nan)):
        assert np.isnan(inclination_tensor(fracture)).all()
    rng = np.random.default_rng(0)
    log_aperture = torch.from_numpy(rng.normal(size=(2, *SHAPE)))
    raw = torch.from_numpy(rng.normal(size=(2, *SHAPE)))
    active = torch.ones_like(log_aperture, dtype=torch.bool)
    unknown = torch.full((2, 3, *SHAPE), math.nan, dtype=torch.float64)
    no_slope = torch.full((2, 2, *SHAPE), math.nan, dtype=torch.float64)
    lcl = LocalCubicLaw().log_k(log_aperture, raw, Geometry(active, unknown, no_slope))
    inclined = InclinedCubicLaw().log_k(log_aperture, raw, Geometry(active, unknown, no_slope))
    assert torch.equal(inclined[:, 0], lcl) and torch.equal(inclined[:, 1], lcl)
    assert torch.equal(inclined[:, 2], torch.zeros_like(lcl))
    known = torch.from_numpy(inclination_tensor(plates(0.5, 0.2))).expand(2, 3, *SHAPE)
    inclined = InclinedCubicLaw().log_k(log_aperture, raw, Geometry(active, known, no_slope))
    torch.testing.assert_close(inclined[:, :2] - lcl.unsqueeze(1), known[:, :2], rtol=0, atol=1e-14)
    assert torch.equal(inclined[:, 2], known[:, 2])


def _winding_plates(seed: int) -> list[Fracture]:
    """One self-affine mid-surface with a uniform gap, sampled on 64², 128² and 256² pixels of the same square: at
    the coarsest, the embedded dataset's maps (64², a gap of 8 voxels); then the same walls seen ever more finely,
    each sampling resolving shorter roughness. The walls are periodic, so each coarser sampling is the finest one's
    Fourier series cut at its Nyquist wavenumber, as the generator would synthesise it on that grid."""
    finest, gap = 256, 32 * VOXEL
    params = RoughnessParams(
        (finest, finest), hurst=0.7, rms=12.0, mean_aperture=0.0, mismatch_length=1e9, seed=seed
    )
    middle = rough_fracture(params).bottom * VOXEL
    fractures = []
    for step in (4, 2, 1):
        n = finest // step
        wall = signal.resample(signal.resample(middle, n, axis=0), n, axis=1)
        voxel = VOXEL * step
        fractures.append(
            Fracture("winding", np.full((n, n), gap), None, voxel_size=voxel, bottom=wall, top=wall + gap)
        )
    return fractures


@pytest.mark.parametrize("seed", range(8))
def test_finer_sampling_of_the_same_walls_leaves_the_flow_rate_within_two_percent(seed):
    # Relative to the LCL of the same uniform gap (the same for every sampling, up to the map's pixel count).
    fractures = _winding_plates(seed)

    def ratios(smoothing: float) -> np.ndarray:
        return np.array(
            [
                inclined_flow_rate(f, smoothing)
                / parallel_plate_flow_rate(f.aperture[0, 0] ** 3 / 12, f.shape)
                for f in fractures
            ]
        )

    # Walls that wind as real ones do: an rms slope of the smoothed mid-surface in the upper half of the published
    # 0.05-0.4 (JRC 0-20).
    middle = 0.5 * (fractures[-1].bottom + fractures[-1].top)
    slope_x, slope_y = smoothed_gradient(middle, VOXEL, fractures[-1].aperture[0, 0])
    assert 0.2 < math.sqrt(np.mean(slope_x**2 + slope_y**2)) < 0.45
    smoothed = ratios(1.0)
    assert np.ptp(smoothed) / smoothed[-1] < 0.02, smoothed
    assert smoothed.max() < 0.95  # the walls wind: the inclination matters at all
    # Slopes taken pixel by pixel grow as the walls are sampled more finely: the flow rate keeps falling.
    raw = ratios(0.0)
    assert np.all(np.diff(raw) < 0) and raw[0] / raw[-1] > 1.5, raw


def _band_limited_plates(seed: int, shortest: int = 16) -> list[Fracture]:
    """A uniform gap between walls that wind as one self-affine mid-surface whose roughness stops at a wavelength of
    ``shortest`` pixels of the coarsest map (two mean apertures of 8 voxels at 16), as every generated fracture's
    does; sampled on 64², 128² and 256² pixels of the same square by Fourier interpolation, which leaves a
    band-limited surface the same surface."""
    coarsest, gap = 64, 8 * VOXEL
    params = RoughnessParams(
        (coarsest, coarsest), hurst=0.7, rms=3.0, mean_aperture=0.0, mismatch_length=1e9, seed=seed
    )
    middle = rough_fracture(params).bottom * VOXEL
    spectrum = np.fft.fft2(middle)
    k = np.hypot(*np.meshgrid(np.fft.fftfreq(coarsest), np.fft.fftfreq(coarsest), indexing="ij"))
    middle = np.fft.ifft2(np.where(k > 1.0 / shortest, 0.0, spectrum)).real
    fractures = []
    for factor in (1, 2, 4):
        n = coarsest * factor
        wall = signal.resample(signal.resample(middle, n, axis=0), n, axis=1)
        fractures.append(
            Fracture(
                "winding", np.full((n, n), gap), None, voxel_size=VOXEL / factor, bottom=wall, top=wall + gap
            )
        )
    return fractures


@pytest.mark.parametrize("seed", range(4))
def test_band_limited_walls_give_the_same_flow_rate_pixel_by_pixel_on_finer_samplings(seed):
    # The default slope (pixel by pixel) is a law of the walls, not of the grid, where the walls are resolved: the
    # flow rate relative to the LCL of the same uniform gap converges as the same walls are sampled more finely.
    fractures = _band_limited_plates(seed)
    ratios = np.array(
        [
            inclined_flow_rate(f, 0.0) / parallel_plate_flow_rate(f.aperture[0, 0] ** 3 / 12, f.shape)
            for f in fractures
        ]
    )
    assert np.ptp(ratios) / ratios[-1] < 0.02, ratios
    assert ratios.max() < 0.97, ratios  # the walls wind: the inclination matters at all
