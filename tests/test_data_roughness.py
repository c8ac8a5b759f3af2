"""Rough-fracture generator: the spectrum it claims, the wall mismatch, and contact spots."""

import numpy as np
import pytest

from flowlearn.data.roughness import RoughnessParams, rough_fracture, self_affine_surface


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
