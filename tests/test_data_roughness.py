"""Rough-fracture generator: the spectrum it claims, the wall mismatch, and contact spots."""

import numpy as np
import pytest
from scipy import optimize, special

from flowlearn.fractures.roughness import (
    WALL_PLACEMENTS,
    RoughnessParams,
    geometry_stats,
    place_walls,
    refine,
    rough_fracture,
    self_affine_surface,
)


def radial_psd_slope(h: np.ndarray, q_min: float, q_max: float) -> float:
    """Log-log slope of the radially averaged periodogram of ``h`` between q_min and q_max (cycles/pixel)."""
    n0, n1 = h.shape
    psd = np.abs(np.fft.fft2(h - h.mean())) ** 2
    q = np.hypot(np.fft.fftfreq(n0)[:, None], np.fft.fftfreq(n1)[None, :])
    edges = np.geomspace(q_min, q_max, 25)
    which = np.digitize(q.ravel(), edges)
    centres, means = [], []
    for b in range(1, len(edges)):
        sel = which == b
        if sel.any():
            centres.append(q.ravel()[sel].mean())
            means.append(psd.ravel()[sel].mean())
    return float(np.polyfit(np.log(centres), np.log(means), 1)[0])


def structure_function_slope(h: np.ndarray, lags: np.ndarray) -> float:
    """Log-log slope of <(h(x + r) - h(x))^2> against r along both axes; 2H for a self-affine surface."""
    s = [0.5 * (np.mean((np.roll(h, r, 0) - h) ** 2) + np.mean((np.roll(h, r, 1) - h) ** 2)) for r in lags]
    return float(np.polyfit(np.log(lags), np.log(s), 1)[0])


@pytest.mark.parametrize("hurst", [0.3, 0.5, 0.8])
def test_spectral_slope_reproduces_hurst_on_256_square(hurst):
    h = self_affine_surface((256, 256), hurst, rms=1.0, rng=np.random.default_rng(7))
    slope = radial_psd_slope(h, q_min=2 / 256, q_max=0.5)
    # 2D self-affine: PSD ∝ q^(-2-2H).
    assert abs((-slope - 2) / 2 - hurst) < 0.1
    assert h.std() == pytest.approx(1.0)


def test_height_differences_scale_with_hurst():
    """An estimator independent of the Fourier filter: the structure function grows as r^(2H) at short lags."""
    for hurst in (0.5, 0.7):
        h = self_affine_surface((256, 256), hurst, rms=1.0, rng=np.random.default_rng(3))
        assert abs(structure_function_slope(h, np.arange(2, 17)) / 2 - hurst) < 0.1


def test_walls_match_above_mismatch_length_so_aperture_has_no_long_waves():
    p = RoughnessParams((128, 128), hurst=0.7, rms=2.0, mean_aperture=20.0, mismatch_length=16.0, seed=1)
    fr = rough_fracture(p)
    assert fr.aperture.min() > 0, "this mean aperture leaves no contact, so the gap is top - bottom exactly"
    gap = np.fft.fft2(fr.aperture - fr.aperture.mean())
    q = np.hypot(np.fft.fftfreq(128)[:, None], np.fft.fftfreq(128)[None, :])
    long_waves = (q > 0) & (q < 1 / 16)
    assert np.abs(gap[long_waves]).max() < 1e-9 * np.abs(gap).max()
    assert np.abs(gap[q > 1 / 16]).max() > 0
    np.testing.assert_allclose(fr.aperture.mean(), 20.0)


def test_independent_walls_give_aperture_rms_sqrt2_times_wall_rms():
    p = RoughnessParams((256, 256), hurst=0.5, rms=1.5, mean_aperture=50.0, mismatch_length=np.inf, seed=2)
    fr = rough_fracture(p)
    # Var(top - bottom) = 2 Var(wall) for uncorrelated walls; the sample correlation is O(1/sqrt(modes)).
    assert fr.aperture.std() == pytest.approx(np.sqrt(2) * 1.5, rel=0.1)
    assert np.hypot(fr.top.std(), fr.bottom.std()) == pytest.approx(np.sqrt(2) * 1.5)


def test_contact_spots_are_zero_and_nothing_is_negative():
    p = RoughnessParams((64, 96), hurst=0.8, rms=3.0, mean_aperture=4.0, mismatch_length=32.0, seed=5)
    fr = rough_fracture(p)
    assert fr.aperture.shape == (64, 96)
    overlap = fr.top <= fr.bottom
    assert overlap.any() and (fr.aperture[overlap] == 0).all() and (fr.aperture >= 0).all()


def test_same_seed_same_fracture_other_seed_other_fracture():
    p = RoughnessParams((32, 32), hurst=0.6, rms=1.0, mean_aperture=5.0, mismatch_length=8.0, seed=11)
    np.testing.assert_array_equal(rough_fracture(p).aperture, rough_fracture(p).aperture)
    other = RoughnessParams(**{**p.__dict__, "seed": 12})
    assert not np.array_equal(rough_fracture(p).aperture, rough_fracture(other).aperture)


@pytest.mark.parametrize("bad", [{"hurst": 0.0}, {"hurst": 1.5}, {"rms": -1.0}, {"mismatch_length": 0.0}])
def test_bad_parameters_raise(bad):
    # Checked when the parameters are made, before any synthesis.
    with pytest.raises(ValueError, match="must be"):
        RoughnessParams(
            **{
                **dict(shape=(8, 8), hurst=0.5, rms=1.0, mean_aperture=1.0, mismatch_length=4.0, seed=0),
                **bad,
            }
        )


def test_min_wavelength_removes_every_shorter_mode():
    p = RoughnessParams((64, 64), hurst=0.7, rms=3.0, mean_aperture=8.0, mismatch_length=32.0, seed=4)
    cut = rough_fracture(RoughnessParams(**{**p.__dict__, "min_wavelength": 16.0}))
    q = np.hypot(np.fft.fftfreq(64)[:, None], np.fft.fftfreq(64)[None, :])
    for wall in (cut.bottom, cut.top):
        power = np.abs(np.fft.fft2(wall)) ** 2
        assert power[q > 1 / 16].max() < 1e-20 * power.max() and power[q < 1 / 16].max() > 0
    # Fewer short wavelengths at the same rms: gentler walls.
    assert geometry_stats(cut.bottom, cut.top).wall_slope < geometry_stats(*_walls(p)).wall_slope


def _walls(params: RoughnessParams) -> tuple[np.ndarray, np.ndarray]:
    fr = rough_fracture(params)
    return fr.bottom, fr.top


def test_shear_shifts_the_top_wall_along_the_flow():
    p = RoughnessParams((32, 48), hurst=0.8, rms=2.0, mean_aperture=6.0, mismatch_length=12.0, seed=9)
    plain = rough_fracture(p)
    sheared = rough_fracture(RoughnessParams(**{**p.__dict__, "shear": 5.0}))
    np.testing.assert_allclose(sheared.top, np.roll(plain.top, 5, axis=1), atol=1e-12)
    np.testing.assert_array_equal(sheared.bottom, plain.bottom)
    # Matched walls sheared apart no longer cancel: the gap varies more.
    assert sheared.aperture.std() > plain.aperture.std()


def test_refine_evaluates_the_same_walls_on_a_finer_grid():
    p = RoughnessParams((16, 20), 0.7, 2.0, 6.0, 12.0, seed=3, min_wavelength=5.0, shear=1.5)
    coarse = rough_fracture(p)
    fine = refine(coarse, 3)
    assert fine.bottom.shape == (48, 60) and fine.params.mean_aperture == 18.0
    # At the coarse nodes the refined walls are the coarse walls scaled by 3 (heights in finer voxels).
    np.testing.assert_allclose(fine.bottom[::3, ::3], 3 * coarse.bottom, atol=1e-12)
    np.testing.assert_allclose(fine.top[::3, ::3], 3 * coarse.top, atol=1e-12)


def test_geometry_stats_of_analytic_walls():
    x = np.arange(64)
    amplitude, wavelength = 2.0, 32
    top = np.tile(4 + amplitude * np.sin(2 * np.pi * x / wavelength), (16, 1))
    bottom = np.full_like(top, -4.0)
    stats = geometry_stats(bottom, top)
    assert stats.mean_aperture == pytest.approx(8.0)
    assert stats.relative_std == pytest.approx(amplitude / np.sqrt(2) / 8.0)
    # rms slope of A sin(kx) is A k / sqrt(2) on the top wall, 0 on the flat bottom; central differences
    # shrink it by sin(k)/k.
    k = 2 * np.pi / wavelength
    assert stats.wall_slope == pytest.approx(np.sqrt(0.5 * (amplitude * np.sin(k)) ** 2 / 2), rel=1e-3)
    assert stats.contact_fraction == 0.0


def test_correlation_length_of_an_egg_box_aperture():
    """a = 8 + cos(kx) + cos(ky): its autocorrelation averaged over directions is J0(k r), which first drops
    below 1/e at k r = z* (J0(z*) = 1/e)."""
    x = np.arange(128)
    k = 2 * np.pi / 32
    top = 8 + np.cos(k * x)[None, :] + np.cos(k * x)[:, None]
    stats = geometry_stats(np.zeros_like(top), top)
    z_star = optimize.brentq(lambda z: special.j0(z) - np.exp(-1), 1.0, 2.4)
    assert stats.correlation_length == pytest.approx(z_star / k, abs=0.5)


def test_wall_placements_keep_the_aperture():
    aperture = np.random.default_rng(0).uniform(0, 5, (12, 14))
    for name in WALL_PLACEMENTS:
        bottom, top = place_walls(aperture, name, seed=1, rms=3.0)
        np.testing.assert_allclose(top - bottom, aperture, atol=1e-12)
    flat_bottom, _ = place_walls(aperture, "flat_bottom")
    assert (flat_bottom == 0).all()
    winding, _ = place_walls(aperture, "self_affine", seed=1, rms=3.0)
    assert (winding + aperture / 2).std() == pytest.approx(3.0)
